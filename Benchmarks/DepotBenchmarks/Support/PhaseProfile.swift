import Foundation

/// A `perf record -g` of one process for the length of one benchmark phase, and a
/// summary of where its CPU went: by thread, and the hottest symbols
/// (`--profile`; `perf` must be installed and allowed to attach).
final class PhaseProfile {
    private let recorder: PerfRecorder
    /// The perf data file, kept after the run (`perf report -i FILE`).
    let file: URL

    /// Starts recording `pid` into `directory/<phase>.perf.data`.
    init(pid: Int32, phase: String, directory: URL) throws {
        file = directory.appendingPathComponent("\(phase).perf.data")
        recorder = try PerfRecorder(pid: pid, file: file, frequency: 499)
    }

    /// Stops recording and returns the summary: CPU share by thread, then by thread and symbol
    /// (self time, entries of at least 1.5%).
    func stop() -> [String] {
        recorder.stop()
        let threads = Self.report(file, sort: "comm", limit: 8)
        let symbols = Self.report(file, sort: "comm,dso,symbol", limit: 25)
        return ["by thread:"] + threads + ["by thread, library, symbol (self):"] + symbols
    }

    private static func report(_ file: URL, sort: String, limit: Int) -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/perf")
        process.arguments = [
            "report", "-i", file.path, "--stdio", "--no-children", "-g", "none", "--sort", sort,
            "--percent-limit", "1.5",
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return ["(perf report failed)"] }
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let lines = text.split(separator: "\n").filter {
            !$0.hasPrefix("#") && !$0.trimmingCharacters(in: .whitespaces).isEmpty
        }
        return lines.prefix(limit).map { $0.trimmingCharacters(in: .whitespaces) }
    }
}
