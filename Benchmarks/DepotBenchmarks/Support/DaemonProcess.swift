import DepotTestSupport
import Foundation

/// A `depotd` child process on its own data directory, listening on one
/// endpoint, its standard error in a log file beside the directory; stopped
/// with SIGTERM (then SIGKILL) when ``stop()`` is called or the value is released.
final class DaemonProcess {
    /// Where the daemon listens.
    enum Transport: String, CaseIterable, Sendable {
        /// `ipc://<data-dir>/depot.sock`, the default endpoint.
        case ipc
        /// `tcp://127.0.0.1:*`, the port chosen by the system.
        case tcp
    }

    private let daemon: Daemon

    /// Starts `executable` and waits (up to 20 s) for its `listening on` line; on `listen` when
    /// given (a restart on the same port), with a `heartbeat` interval in seconds (the daemon's
    /// default when `nil`).
    init(
        executable: URL, dataDirectory: URL, transport: Transport, extraArguments: [String] = [],
        listen: String? = nil, heartbeat: Double? = 3600
    ) throws {
        let dataDirectory = dataDirectory.standardizedFileURL
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        let endpoint: String
        switch (listen, transport) {
        case (let listen?, _): endpoint = listen
        case (nil, .ipc): endpoint = "ipc://" + dataDirectory.appendingPathComponent("depot.sock").path
        case (nil, .tcp): endpoint = "tcp://127.0.0.1:*"
        }
        // A long heartbeat by default: a benchmark session may sit idle while the baseline runs.
        daemon = try Daemon(
            dataDirectory: dataDirectory, arguments: extraArguments, heartbeat: heartbeat, listen: endpoint,
            executable: executable,
            logFile: dataDirectory.deletingLastPathComponent().appendingPathComponent(
                "\(dataDirectory.lastPathComponent)-\(UUID().uuidString.prefix(8)).log"))
    }

    deinit { stop() }

    /// Its data directory.
    var dataDirectory: URL { daemon.dataDirectory }
    /// The endpoint it reported (`depotd listening on ENDPOINT`).
    var endpoint: String { daemon.endpoint }
    /// The daemon's process id.
    var pid: Int32 { daemon.process.processIdentifier }
    /// What the daemon wrote to standard error.
    var log: String { daemon.log }

    /// The daemon's memory now and at its peak.
    func memory() -> ProcessMemory? { ProcessMemory.sample(pid: pid) }

    /// Asks the daemon to stop (SIGTERM) and waits; kills it after 10 s.
    func stop() { daemon.stop(killAfter: .seconds(10)) }
}
