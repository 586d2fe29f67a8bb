import ArgumentParser
import DepotStudio

/// `depot studio`: a local web inspector of the daemon.
struct StudioCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "studio",
        abstract: "Serve Depot Studio, a live web inspector of the daemon, on http://127.0.0.1:PORT/.",
        discussion: """
            Pages: the model, an entity's objects (predicate and sort), live fetched results whose rows insert,
            move and delete as deltas arrive, the transaction history, sessions and stats. /metrics serves the
            Prometheus text format. Loopback only unless --host says otherwise; there is no authentication.
            """)

    @OptionGroup var connection: ConnectionOptions

    @Option(help: "The port to serve on (0 picks a free one).")
    var port = 8080

    @Option(help: "The address to bind (default loopback; anything else exposes the store without authentication).")
    var host = "127.0.0.1"

    func run() async throws {
        let endpoint = connection.resolvedEndpoint
        guard endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("tcp://") else {
            throw CLIError("bad endpoint '\(endpoint)': use ipc://PATH or tcp://HOST:PORT")
        }
        guard (0...65535).contains(port) else { throw CLIError("--port must be between 0 and 65535, got \(port)") }
        try await Studio(endpoint: endpoint, host: host, port: port).run()
    }
}
