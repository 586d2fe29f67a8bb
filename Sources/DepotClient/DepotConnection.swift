import DepotProtocol
import ZeroMQ

/// A session with `depotd`: connect, `initialize`, then typed calls and a
/// stream of server notifications, with heartbeats sent in the background.
///
/// ```swift
/// let connection = try await DepotConnection.connect(to: "ipc://./depot-data/depot.sock")
/// let teams = try await connection.call(StoreFetch.self, FetchRequest(entity: "Team"))
/// ```
///
/// It is safe to use from any task: one internal thread owns the ZeroMQ socket.
public final class DepotConnection: Sendable {
    private let transport: ClientTransport
    /// The endpoint it connected to.
    public let endpoint: String
    /// What the server said in `initialize`.
    public let serverInfo: Initialize.Result
    /// The default time to wait for an answer.
    public let timeout: Duration

    private init(transport: ClientTransport, endpoint: String, serverInfo: Initialize.Result, timeout: Duration) {
        self.transport = transport
        self.endpoint = endpoint
        self.serverInfo = serverInfo
        self.timeout = timeout
    }

    /// Connects to `endpoint` and opens a session.
    ///
    /// - Parameters:
    ///   - endpoint: `ipc://PATH` or `tcp://127.0.0.1:PORT`.
    ///   - clientInfo: who the client is, for the server's logs.
    ///   - timeout: how long to wait for `initialize` and, by default, for each call.
    public static func connect(
        to endpoint: String, clientInfo: ImplementationInfo = ImplementationInfo(name: "DepotClient", version: "0.1.0"),
        timeout: Duration = .seconds(30)
    ) async throws(DepotClientError) -> DepotConnection {
        let transport: ClientTransport
        do {
            transport = try ClientTransport(endpoint: endpoint)
        } catch {
            throw .transport(error)
        }
        do {
            let params = try JSONCoding.encode(Initialize.Parameters(clientInfo: clientInfo))
            let result = try await Self.call(transport, method: Initialize.name, params: params, timeout: timeout)
            let info = try Self.decode(Initialize.Result.self, result)
            transport.heartbeatInterval.withLock { $0 = info.heartbeatInterval }
            return DepotConnection(transport: transport, endpoint: endpoint, serverInfo: info, timeout: timeout)
        } catch let error as DepotClientError {
            transport.stop()
            throw error
        } catch {
            transport.stop()
            throw .invalidResponse("\(error)")
        }
    }

    /// Calls `method` with typed params and result.
    public func call<M: Method>(_ method: M.Type, _ params: M.Parameters, timeout: Duration? = nil) async throws(DepotClientError) -> M.Result {
        let json: JSONValue
        do {
            json = try JSONCoding.encode(params)
        } catch {
            throw .invalidResponse("could not encode params: \(error.message)")
        }
        let result = try await call(method: M.name, params: json, timeout: timeout)
        return try Self.decode(M.Result.self, result)
    }

    /// Calls `method` with untyped params and result.
    public func call(method: String, params: JSONValue?, timeout: Duration? = nil) async throws(DepotClientError) -> JSONValue {
        try await Self.call(transport, method: method, params: params, timeout: timeout ?? self.timeout)
    }

    /// Calls `method` with an explicit request id, so that it can be cancelled
    /// with ``cancel(_:)`` while it runs.
    public func call(id: RequestID, method: String, params: JSONValue?, timeout: Duration? = nil) async throws(DepotClientError) -> JSONValue {
        try await Self.call(transport, id: id, method: method, params: params, timeout: timeout ?? self.timeout)
    }

    /// A fresh request id for ``call(id:method:params:timeout:)``.
    public func makeRequestID() -> RequestID { transport.makeID() }

    /// Sends `$/cancelRequest` for a running request.
    public func cancel(_ id: RequestID) {
        notify(CancelRequest.self, CancelRequest.Parameters(id: id))
    }

    /// Sends a notification.
    public func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters) {
        guard let json = try? JSONCoding.encode(params) else { return }
        transport.send(Message.notification(method: N.name, params: json).encoded)
    }

    /// Sends raw bytes as one message (for tests of the server's input handling).
    public func sendRaw(_ bytes: [UInt8]) { transport.send(bytes) }

    /// Every notification the server sends from now on. Each call returns an
    /// independent stream; it ends when the connection closes.
    public func notifications() -> AsyncStream<ServerNotification> { transport.notifications() }

    /// Sends `disconnect` and closes the socket.
    public func close() async {
        _ = try? await call(method: Disconnect.name, params: nil, timeout: .seconds(2))
        transport.stop()
    }

    /// Closes the socket without telling the server (it will expire the session).
    public func abort() { transport.stop() }

    private static func call(
        _ transport: ClientTransport, id: RequestID? = nil, method: String, params: JSONValue?, timeout: Duration
    ) async throws(DepotClientError) -> JSONValue {
        let id = id ?? transport.makeID()
        let result: Result<JSONValue, DepotClientError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                transport.request(id: id, method: method, params: params, timeout: timeout) { continuation.resume(returning: $0) }
            }
        } onCancel: {
            transport.send(Message.notification(method: CancelRequest.name, params: ["id": id.json]).encoded)
        }
        return try result.get()
    }

    private static func decode<T: Decodable>(_ type: T.Type, _ value: JSONValue) throws(DepotClientError) -> T {
        do {
            return try JSONCoding.decode(T.self, from: value, field: "result")
        } catch {
            throw .invalidResponse(error.message)
        }
    }
}
