import DepotProtocol
import ZeroMQ

/// Why a call through a ``DepotConnection`` failed.
public enum DepotClientError: Error, Sendable, CustomStringConvertible {
    /// The server answered with a JSON-RPC error (its code, message and data).
    case server(RPCError)
    /// No answer came within the timeout.
    case timedOut(method: String, after: Duration)
    /// The connection is closed.
    case closed
    /// The connection to the daemon dropped while the call was in flight: it may
    /// or may not have run. The connection reconnects by itself.
    case connectionLost(method: String)
    /// ZeroMQ failed (a bad endpoint, say).
    case transport(ZMQError)
    /// The server's answer did not have the expected shape.
    case invalidResponse(String)
    /// The client's persistent store (a local SQLite file) could not be opened, read or written.
    case persistentStore(String)

    public var description: String {
        switch self {
        case .server(let error): "server error \(error.code.rawValue): \(error.message)"
        case .timedOut(let method, let after):
            "no answer to \(method) within \(after): is depotd running at that endpoint?"
        case .closed: "the connection is closed"
        case .connectionLost(let method):
            "the connection to depotd dropped while \(method) was in flight; it may or may not have run"
        case .transport(let error): "transport error: \(error)"
        case .invalidResponse(let detail): "invalid response: \(detail)"
        case .persistentStore(let detail): "persistent store: \(detail)"
        }
    }

    /// Whether the call was cancelled (by the client's task or `$/cancelRequest`, -32800).
    public var isCancellation: Bool { rpcError?.code == .requestCancelled }

    /// Whether the daemon was out of reach: no answer in time, or the link dropped.
    var leftTheDaemonUnreached: Bool {
        switch self {
        case .timedOut, .connectionLost: true
        default: false
        }
    }

    /// The server's error, if this is one.
    public var rpcError: RPCError? {
        if case .server(let error) = self { return error }
        return nil
    }
}
