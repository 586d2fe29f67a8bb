import DepotClient
import DepotProtocol
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore

/// Depot Studio: a local web inspector of a running `depotd` (DESIGN.md §12).
///
/// It serves the pages in `Site/` (plain HTML, CSS and JavaScript modules,
/// shipped as the module's resources), `/metrics` (Prometheus text from
/// `server/stats`) and `/ws`: a WebSocket per browser tab, bridged to its own
/// session with the daemon (see ``BridgeSession``). It binds the loopback
/// interface unless told otherwise.
public struct Studio: Sendable {
    /// The daemon's endpoint.
    public var endpoint: String
    /// The address to bind (loopback by default).
    public var host: String
    /// The port to bind; 0 picks a free one.
    public var port: Int
    /// Called once the server listens, with the URL it serves.
    public var onListening: @Sendable (String) -> Void

    /// A studio for the daemon at `endpoint`.
    public init(
        endpoint: String, host: String = "127.0.0.1", port: Int = 8080,
        onListening: @escaping @Sendable (String) -> Void = {
            // Written straight to the file descriptor: scripts wait for this line on a pipe.
            FileHandle.standardOutput.write(Data("depot studio on \($0)\n".utf8))
        }
    ) {
        self.endpoint = endpoint
        self.host = host
        self.port = port
        self.onListening = onListening
    }

    /// The folder of the pages inside the module's resources.
    public static var siteFolder: String? {
        Bundle.module.resourceURL?.appendingPathComponent("Site").path
    }

    /// Serves until SIGINT or SIGTERM.
    public func run() async throws {
        guard let site = Self.siteFolder, FileManager.default.fileExists(atPath: site + "/index.html") else {
            throw StudioError("the studio's pages are missing (expected them in the DepotStudio resource bundle)")
        }
        var logger = Logger(label: "depot-studio")
        logger.logLevel = .warning
        let endpoint = self.endpoint
        let metrics = MetricsSource(endpoint: endpoint)

        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: FileMiddleware(site, searchForIndexHtml: true, logger: logger))
        router.get("/metrics") { _, _ -> Response in
            let (status, text) = await metrics.exposition()
            return Response(
                status: status, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        router.get("/favicon.ico") { _, _ in Response(status: .noContent) }

        let sockets = Router(context: BasicWebSocketRequestContext.self)
        sockets.ws("/ws") { inbound, outbound, _ in
            await BridgeSession(endpoint: endpoint).run(inbound: inbound, outbound: outbound)
        }

        let onListening = self.onListening
        let host = self.host
        let app = Application(
            router: router, server: .http1WebSocketUpgrade(webSocketRouter: sockets),
            configuration: .init(address: .hostname(host, port: port), serverName: "depot-studio"),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? 0
                onListening("http://\(host):\(bound)/")
            },
            logger: logger)
        try await app.runService()
    }
}

/// Why the studio could not start.
public struct StudioError: Error, CustomStringConvertible {
    /// What went wrong, for people.
    public let description: String

    init(_ description: String) { self.description = description }
}

/// The daemon connection behind `/metrics`, opened on first use and again after a failure.
actor MetricsSource {
    private let endpoint: String
    private var connection: DepotConnection?

    init(endpoint: String) { self.endpoint = endpoint }

    /// The exposition text, or a 503 naming the reason.
    func exposition() async -> (HTTPResponse.Status, String) {
        do {
            let connection = try await currentConnection()
            let stats = try await connection.call(ServerStats.self, .init(), timeout: .seconds(5))
            return (.ok, PrometheusExposition.text(stats))
        } catch {
            connection?.abort()
            connection = nil
            return (.serviceUnavailable, "# depotd at \(endpoint) did not answer server/stats: \(error)\ndepot_up 0\n")
        }
    }

    private func currentConnection() async throws(DepotClientError) -> DepotConnection {
        if let connection { return connection }
        let opened = try await DepotConnection.connect(
            to: endpoint, clientInfo: ImplementationInfo(name: "depot studio metrics", version: "0.1.0"),
            timeout: .seconds(3))
        connection = opened
        return opened
    }
}
