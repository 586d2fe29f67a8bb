import DepotClient
import DepotProtocol
import Foundation

/// A real `depotd` process on a temporary data directory and a loopback TCP port, for tests and benchmarks.
///
/// Killed (SIGKILL) when released; ``stop(signal:killAfter:)`` stops it earlier, ``removeData()`` removes its
/// directory.
public final class Daemon: @unchecked Sendable {
    /// The child process.
    public let process = Process()
    /// The daemon's data directory.
    public let dataDirectory: URL
    /// The endpoint the daemon reported (`depotd listening on ENDPOINT`).
    public private(set) var endpoint = ""
    private let output = Pipe()
    private let errors: Pipe?
    private let logFile: URL?

    /// Starts a daemon and waits until it listens (on `listen`, a fresh loopback port by default).
    ///
    /// - Parameters:
    ///   - dataDirectory: The data directory; a fresh temporary one by default.
    ///   - arguments: More command-line arguments.
    ///   - heartbeat: The heartbeat interval in seconds, when not the daemon's default.
    ///   - listen: The endpoint to listen on.
    ///   - environment: Variables added to this process's environment for the daemon.
    ///   - executable: The daemon to run.
    ///   - logFile: Where the daemon's standard error goes, for a long run; a pipe by default.
    ///   - openFileLimit: Soft and hard open-file limit to start the daemon under (`prlimit --nofile`).
    /// - Throws: ``DaemonError/didNotStart(_:)`` when the daemon exits or says nothing within 20 s.
    public init(
        dataDirectory: URL? = nil, arguments: [String] = [], heartbeat: Double? = nil,
        listen: String = "tcp://127.0.0.1:*", environment: [String: String] = [:],
        executable: URL = Executables.depotd, logFile: URL? = nil, openFileLimit: Int? = nil
    ) throws {
        self.dataDirectory =
            dataDirectory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("depot-e2e-\(UUID().uuidString)")
        process.executableURL = executable
        var arguments =
            ["--data-dir", self.dataDirectory.path, "--listen", listen, "--log-level", "warning"] + arguments
        if let heartbeat { arguments += ["--heartbeat-interval", String(heartbeat)] }
        // `make test` runs the end-to-end suites again with every daemon on PostgreSQL, each in a
        // schema of its own (a cluster of one).
        if let store = ProcessInfo.processInfo.environment["DEPOT_TEST_STORE"], !store.isEmpty,
            !arguments.contains("--store")
        {
            // Named after the data directory: a daemon restarted on it finds its cluster again.
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in self.dataDirectory.standardizedFileURL.path.utf8 {
                hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
            }
            let schema = "e_" + String(hash, radix: 36)
            arguments += ["--store", "\(store)?schema=\(schema)"]
        }
        if let openFileLimit {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            arguments = ["--nofile=\(openFileLimit):\(openFileLimit)", executable.path] + arguments
        }
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.standardOutput = output
        self.logFile = logFile
        if let logFile {
            errors = nil
            _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
            process.standardError = try FileHandle(forWritingTo: logFile)
        } else {
            errors = Pipe()
            process.standardError = errors
        }
        try process.run()
        endpoint = try waitForEndpoint()
    }

    deinit {
        kill()
    }

    private func waitForEndpoint() throws(DaemonError) -> String {
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
        kill()
        throw .didNotStart("\(text) \(log)")
    }

    /// A new client session named `name`.
    public func connect(name: String = "e2e") async throws -> DepotConnection {
        try await DepotConnection.connect(
            to: endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(30))
    }

    /// What the daemon wrote to standard error: so far with a log file, else once it exited (empty before).
    public var log: String {
        if let logFile { return (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }
        // Reading a pipe whose writer is alive would wait for it.
        guard let errors, !process.isRunning else { return "" }
        return String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self)
    }

    /// Sends `signal` and waits for the exit, killing the daemon (SIGKILL) if it still runs after `timeout`;
    /// returns the exit status.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, killAfter timeout: Duration? = nil) -> Int32 {
        guard process.isRunning else { return process.terminationStatus }
        Foundation.kill(process.processIdentifier, signal)
        if let timeout {
            let deadline = ContinuousClock.now + timeout
            while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
            if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// CPU seconds (user and system) the daemon has used so far, from `/proc/<pid>/stat`.
    public var cpuSeconds: Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        // After "pid (comm)": state is field 3, utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Kills the daemon (SIGKILL, as a crash would) and waits for the exit; returns the exit status.
    @discardableResult
    public func kill() -> Int32 { stop(signal: SIGKILL) }

    /// Removes the data directory (after ``stop(signal:killAfter:)``).
    public func removeData() { try? FileManager.default.removeItem(at: dataDirectory) }

    /// Saves `parameters` from another process (`depot call store/save`), as an importer or a script would.
    ///
    /// - Throws: ``DaemonError/failed(_:)`` when `depot` exits non-zero.
    public func saveFromAnotherProcess(_ parameters: StoreSave.Parameters) throws -> StoreSave.Result {
        let json = String(decoding: JSONWriter.encode(try JSONCoding.encode(parameters)), as: UTF8.self)
        let outcome = try ProcessOutcome.run(Executables.depot, ["call", "--connect", endpoint, "store/save", json])
        guard outcome.status == 0 else { throw DaemonError.failed(outcome) }
        return try JSONCoding.decode(StoreSave.Result.self, from: try JSONParser.parse(Array(outcome.output.utf8)))
    }
}

/// Why a ``Daemon`` or a run of a Depot executable failed.
public enum DaemonError: Error, CustomStringConvertible {
    /// `depotd` exited, or said nothing, before it listened; with what it printed.
    case didNotStart(String)
    /// A process still ran after its time limit and was killed; with its arguments.
    case didNotExit([String])
    /// A process exited with a non-zero status.
    case failed(ProcessOutcome)

    /// What happened, with what the process printed.
    public var description: String {
        switch self {
        case .didNotStart(let printed): "depotd did not start: \(printed)"
        case .didNotExit(let arguments): "\(arguments) did not exit in time"
        case .failed(let outcome): "exit status \(outcome.status): \(outcome.errors)"
        }
    }
}
