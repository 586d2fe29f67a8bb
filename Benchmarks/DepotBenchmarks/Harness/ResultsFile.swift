import DepotProtocol
import Foundation
import GRDBSQLite
import ZeroMQ

/// One run's results as JSON: `<directory>/<timestamp>.json`, copied to `latest.json`.
///
/// The shape (`"format": 1`) is documented in Benchmarks/README.md.
struct ResultsFile {
    /// The run's options.
    var options: BenchmarkOptions
    /// The `--filter` values.
    var filters: [String]
    /// The suites' reports.
    var reports: [SuiteReport]

    /// The whole document.
    var json: JSONValue {
        let zmq = ZeroMQ.libraryVersion
        return [
            "format": 1,
            "timestamp": .string(ISO8601DateFormatter().string(from: Date())),
            "git": Self.gitDescription().map { .string($0) } ?? .null,
            "host": [
                "hostname": .string(ProcessInfo.processInfo.hostName),
                "processors": .int(Int64(ProcessInfo.processInfo.activeProcessorCount)),
                "loadAverage": .array(Self.loadAverage().map { .double($0) }),
                "os": .string(ProcessInfo.processInfo.operatingSystemVersionString),
                "libzmq": .string("\(zmq.major).\(zmq.minor).\(zmq.patch)"),
                "sqlite": .string(String(cString: sqlite3_libversion())),
            ],
            "options": [
                "quick": .bool(options.quick),
                "filter": .array(filters.map { .string($0) }),
                "warmupSeconds": .double(options.plan.warmup),
                "durationSeconds": .double(options.plan.duration),
                "rounds": .int(Int64(options.plan.rounds)),
                "depotd": .string(options.depotd.path),
            ],
            "suites": .array(reports.map(\.json)),
        ]
    }

    /// Writes the file and `latest.json`; returns the timestamped file's URL.
    func write(to directory: URL) throws -> URL {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let data = Data((JSONWriter.encodePretty(json) + "\n").utf8)
        let file = directory.appendingPathComponent("\(formatter.string(from: Date())).json")
        try data.write(to: file)
        try data.write(to: directory.appendingPathComponent("latest.json"))
        return file
    }

    private static func loadAverage() -> [Double] {
        var loads = [Double](repeating: 0, count: 3)
        return getloadavg(&loads, 3) == 3 ? loads : []
    }

    /// `git describe --always --dirty` of the working directory, if it is a checkout.
    private static func gitDescription() -> String? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["git", "describe", "--always", "--dirty"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
