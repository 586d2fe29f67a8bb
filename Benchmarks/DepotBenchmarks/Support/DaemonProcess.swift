import Foundation

/// A `depotd` child process on its own data directory, listening on one
/// endpoint; stopped with SIGTERM (then SIGKILL) when ``stop()`` is called or
/// the value is released.
final class DaemonProcess {
    /// Where the daemon listens.
    enum Transport: String, CaseIterable, Sendable {
        /// `ipc://<data-dir>/depot.sock`, the default endpoint.
        case ipc
        /// `tcp://127.0.0.1:*`, the port chosen by the system.
        case tcp
    }

    /// The child process.
    let process = Process()
    /// Its data directory.
    let dataDirectory: URL
    /// The endpoint it reported (`depotd listening on ENDPOINT`).
    private(set) var endpoint = ""
    private let output = Pipe()
    private let logFile: URL

    /// Starts `executable` and waits (up to 20 s) for its `listening on` line.
    init(executable: URL, dataDirectory: URL, transport: Transport, extraArguments: [String] = []) throws {
        self.dataDirectory = dataDirectory.standardizedFileURL
        try FileManager.default.createDirectory(at: self.dataDirectory, withIntermediateDirectories: true)
        let listen =
            switch transport {
            case .ipc: "ipc://" + self.dataDirectory.appendingPathComponent("depot.sock").path
            case .tcp: "tcp://127.0.0.1:*"
            }
        logFile = self.dataDirectory.deletingLastPathComponent().appendingPathComponent(
            "\(self.dataDirectory.lastPathComponent).log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        process.executableURL = executable
        // A long heartbeat: a benchmark session may sit idle while the baseline runs.
        process.arguments =
            [
                "--data-dir", self.dataDirectory.path, "--listen", listen, "--log-level", "warning",
                "--heartbeat-interval", "3600",
            ]
            + extraArguments
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: logFile)
        try process.run()
        endpoint = try waitForEndpoint()
    }

    deinit { stop() }

    /// The daemon's process id.
    var pid: Int32 { process.processIdentifier }

    /// The daemon's memory now and at its peak.
    func memory() -> ProcessMemory? { ProcessMemory.sample(pid: pid) }

    /// Asks the daemon to stop (SIGTERM) and waits; kills it after 10 s.
    func stop() {
        guard process.isRunning else { return }
        kill(pid, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            kill(pid, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// What the daemon wrote to standard error.
    var log: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    private func waitForEndpoint() throws -> String {
        let handle = output.fileHandleForReading
        var text = ""
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let data = handle.availableData
            if data.isEmpty {
                if !process.isRunning { break }
                continue
            }
            text += String(decoding: data, as: UTF8.self)
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("depotd listening on ") }) {
                return String(line.dropFirst("depotd listening on ".count))
            }
        }
        stop()
        throw BenchmarkError("depotd did not start: \(text) \(log)")
    }
}
