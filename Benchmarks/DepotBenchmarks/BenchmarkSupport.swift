import Foundation

/// A benchmark failed to run.
struct BenchmarkError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A release `depotd` on a temporary data directory and a loopback port.
final class BenchmarkDaemon {
    let process = Process()
    let directory: URL
    private(set) var endpoint = ""

    init(executable: URL, arguments: [String] = []) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-bench-\(UUID().uuidString)")
        process.executableURL = executable
        process.arguments =
            ["--data-dir", directory.path, "--listen", "tcp://127.0.0.1:*", "--log-level", "warning"] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        var text = ""
        while !text.contains("\n") {
            let data = output.fileHandleForReading.availableData
            if data.isEmpty { throw BenchmarkError("depotd exited before listening") }
            text += String(decoding: data, as: UTF8.self)
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("depotd listening on ") }) else {
            throw BenchmarkError("unexpected depotd output: \(text)")
        }
        endpoint = String(line.dropFirst("depotd listening on ".count))
    }

    /// The daemon's resident set size in bytes (VmRSS).
    func residentBytes() -> Int { Self.status(pid: process.processIdentifier, field: "VmRSS") }

    /// The daemon's peak resident set size in bytes (VmHWM).
    func peakResidentBytes() -> Int { Self.status(pid: process.processIdentifier, field: "VmHWM") }

    static func status(pid: Int32, field: String) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") })
        else { return 0 }
        let kilobytes = line.split(separator: " ").compactMap { Int($0) }.first ?? 0
        return kilobytes * 1024
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// The `p`-th percentile (0…1) of `values`.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    /// The duration in milliseconds.
    var milliseconds: Double { seconds * 1000 }
}

/// ISO 8601 text for benchmark data.
enum ISO8601Text {
    static func string(seconds: Double) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: seconds))
    }
}
