import DepotProtocol
import Foundation
import Synchronization
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
///
/// ## Reconnecting
///
/// When the daemon restarts (or the link drops, or the session expires), the
/// socket reconnects by itself and the connection opens a new session: it
/// re-sends `initialize` with backoff as soon as it sees the drop, a call
/// answered -32002 (not initialized), or three heartbeat intervals of silence.
/// A call answered -32002 is retried once on the new session (the server did
/// not run it). Listeners learn of it through ``connectionEvents()``; the
/// client's own types (``FetchedResultsController``, ``ObjectContext``) resync
/// by themselves.
public final class DepotConnection: Sendable {
    private struct SessionState {
        var serverInfo: Initialize.Result
        var recovery: Task<Void, Never>?
    }

    private let transport: ClientTransport
    private let session: Mutex<SessionState>
    private let events = Broadcaster<ConnectionEvent>()
    /// The link's state, changed (and streamed) under this lock so that every stream sees the changes in order.
    private let linkState = Mutex(ConnectionState.connected)
    private let states = Broadcaster<ConnectionState>()
    private let clientInfo: ImplementationInfo
    /// The endpoint it connected to.
    public let endpoint: String
    /// The default time to wait for an answer.
    public let timeout: Duration

    /// What the server said in the latest `initialize` (it changes on reconnect).
    public var serverInfo: Initialize.Result { session.withLock { $0.serverInfo } }

    private init(
        transport: ClientTransport, endpoint: String, clientInfo: ImplementationInfo, serverInfo: Initialize.Result,
        timeout: Duration
    ) {
        self.transport = transport
        self.endpoint = endpoint
        self.clientInfo = clientInfo
        self.session = Mutex(SessionState(serverInfo: serverInfo))
        self.timeout = timeout
    }

    /// Connects to `endpoint` and opens a session.
    ///
    /// - Parameters:
    ///   - endpoint: `ipc://PATH` or `tcp://127.0.0.1:PORT`.
    ///   - clientInfo: who the client is, for the server's logs.
    ///   - timeout: how long to wait for `initialize` and, by default, for each call.
    ///   - keys: CURVE keys, for a daemon whose TCP endpoints require them (`nil`: plain).
    public static func connect(
        to endpoint: String, clientInfo: ImplementationInfo = ImplementationInfo(name: "DepotClient", version: "0.1.0"),
        timeout: Duration = .seconds(30), keys: ClientKeys? = nil
    ) async throws(DepotClientError) -> DepotConnection {
        let transport: ClientTransport
        do {
            transport = try ClientTransport(endpoint: endpoint, keys: keys)
        } catch {
            throw .transport(error)
        }
        do {
            let info = try await initialize(transport, clientInfo: clientInfo, timeout: timeout)
            let connection = DepotConnection(
                transport: transport, endpoint: endpoint, clientInfo: clientInfo, serverInfo: info, timeout: timeout)
            transport.onLinkEvent.withLock {
                $0 = { [weak connection] event in connection?.linkChanged(event) }
            }
            return connection
        } catch {
            transport.stop()
            throw error
        }
    }

    /// Opens a connection to `endpoint` without waiting for the daemon: it returns at once, and the
    /// session opens in the background as soon as the daemon answers (after a cold start with the
    /// daemon down, say, or on a laptop off the network). Until then ``state`` is
    /// ``ConnectionState/reconnecting`` and calls wait for the session (or time out); once it is
    /// open, ``connectionEvents()`` reports ``ConnectionEvent/reconnected(_:)`` and ``state`` is
    /// ``ConnectionState/connected``. A ``FetchedResultsController`` with a persistent store shows
    /// its stored results meanwhile and catches up when the session opens.
    ///
    /// - Parameters: as ``connect(to:clientInfo:timeout:keys:)``.
    /// - Throws: ``DepotClientError/transport(_:)`` when the endpoint cannot be used at all.
    public static func open(
        to endpoint: String, clientInfo: ImplementationInfo = ImplementationInfo(name: "DepotClient", version: "0.1.0"),
        timeout: Duration = .seconds(30), keys: ClientKeys? = nil
    ) throws(DepotClientError) -> DepotConnection {
        let transport: ClientTransport
        do {
            transport = try ClientTransport(endpoint: endpoint, keys: keys)
        } catch {
            throw .transport(error)
        }
        let placeholder = Initialize.Result(
            serverInfo: ImplementationInfo(name: "", version: ""), protocolVersion: depotProtocolVersion,
            sessionId: "", heartbeatInterval: 0, capabilities: [:])
        let connection = DepotConnection(
            transport: transport, endpoint: endpoint, clientInfo: clientInfo, serverInfo: placeholder,
            timeout: timeout)
        transport.onLinkEvent.withLock {
            $0 = { [weak connection] event in connection?.linkChanged(event) }
        }
        connection.session.withLock { state in
            state.recovery = Task { await connection.reinitialize() }
            connection.enter(.reconnecting)
        }
        return connection
    }

    /// A connection that never sent `initialize` (to an endpoint where nothing
    /// needs to listen), for tests of the client's own logic.
    static func unconnected(to endpoint: String, timeout: Duration = .seconds(1)) throws(DepotClientError)
        -> DepotConnection
    {
        let transport: ClientTransport
        do {
            transport = try ClientTransport(endpoint: endpoint)
        } catch {
            throw .transport(error)
        }
        let info = Initialize.Result(
            serverInfo: ImplementationInfo(name: "none", version: "0"), protocolVersion: depotProtocolVersion,
            sessionId: "", heartbeatInterval: 0,
            capabilities: [:])
        return DepotConnection(
            transport: transport, endpoint: endpoint, clientInfo: info.serverInfo, serverInfo: info, timeout: timeout)
    }

    /// Calls `method` with typed params and result.
    public func call<M: Method>(_ method: M.Type, _ params: M.Parameters, timeout: Duration? = nil)
        async throws(DepotClientError) -> M.Result
    {
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
    public func call(method: String, params: JSONValue?, timeout: Duration? = nil) async throws(DepotClientError)
        -> JSONValue
    {
        try await call(id: nil, method: method, params: params, timeout: timeout)
    }

    /// Calls `method` with an explicit request id, so that it can be cancelled
    /// with ``cancel(_:)`` while it runs.
    public func call(id: RequestID, method: String, params: JSONValue?, timeout: Duration? = nil)
        async throws(DepotClientError) -> JSONValue
    {
        try await call(id: Optional(id), method: method, params: params, timeout: timeout)
    }

    private func call(id: RequestID?, method: String, params: JSONValue?, timeout: Duration?)
        async throws(DepotClientError) -> JSONValue
    {
        let timeout = timeout ?? self.timeout
        do {
            return try await Self.call(transport, id: id, method: method, params: params, timeout: timeout)
        } catch {
            // -32002: the server has no session for us and did not run the call.
            guard error.rpcError?.code == .serverNotInitialized else { throw error }
            await recoverSession()
            return try await Self.call(transport, id: id, method: method, params: params, timeout: timeout)
        }
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

    /// Every notification the server sends from now on. Each call returns an
    /// independent stream; it ends when the connection closes.
    ///
    /// The partial-result chunks of the client's own streamed fetches
    /// (``execute(_:)``, ``fetch(_:as:progress:)``) are not among them: they go
    /// to their fetch as bytes, which decodes the objects from them directly.
    /// Their `workDoneToken` progress, and chunks under a `partialResultToken`
    /// of your own, are.
    public func notifications() -> AsyncStream<ServerNotification> { transport.notifications() }

    /// The `$/progress` partial-result chunks for `token`, as bytes (see ``notifications()``).
    func partialResults(token: String) -> AsyncStream<PartialResultChunk> { transport.partialResults(token: token) }

    /// Every change of the link from now on (``ConnectionEvent``). Each call
    /// returns an independent stream; it ends when the connection closes.
    public func connectionEvents() -> AsyncStream<ConnectionEvent> { events.stream() }

    /// Where the link to the daemon stands now.
    public var state: ConnectionState { linkState.withLock { $0 } }

    /// The link's state now, then every change of it (``ConnectionState``): after
    /// a daemon restart, `.disconnected`, `.reconnecting`, `.connected`. Each call
    /// returns an independent stream; it ends when the connection closes.
    ///
    /// ```swift
    /// for await state in connection.connectionStates() {
    ///     offlineBadge.isHidden = state == .connected
    /// }
    /// ```
    public func connectionStates() -> AsyncStream<ConnectionState> {
        linkState.withLock { state in states.stream(startingWith: state) }
    }

    /// Whether the connection was closed (``close()`` or ``abort()``); calls then fail with ``DepotClientError/closed``.
    public var isClosed: Bool { transport.isStopped }

    /// The bytes of every message received from the daemon so far (answers and notifications):
    /// what a sync cost on the wire (a catch-up against a full subscribe, say).
    public var bytesReceived: Int64 { transport.bytesReceived.load(ordering: .relaxed) }

    /// Sends `disconnect` and closes the socket.
    public func close() async {
        _ = try? await Self.call(transport, method: Disconnect.name, params: nil, timeout: .seconds(2))
        shutDown()
    }

    /// Closes the socket without telling the server (it will expire the session).
    public func abort() { shutDown() }

    /// Opens a new session now (as after a daemon restart) and reports
    /// ``ConnectionEvent/reconnected(_:)``; concurrent callers share one attempt.
    public func reconnect() async { await recoverSession() }

    // MARK: Session recovery

    private func shutDown() {
        transport.stop()
        session.withLock { $0.recovery?.cancel() }
        events.finish()
        states.finish()
    }

    private func linkChanged(_ event: ClientTransport.LinkEvent) {
        switch event {
        case .disconnected:
            enter(.disconnected)
            broadcast(.disconnected)
        case .reconnected, .silent:
            Task { await self.recoverSession() }
        }
    }

    private func recoverSession() async {
        let task = session.withLock { state in
            if let running = state.recovery { return running }
            let task = Task { await self.reinitialize() }
            state.recovery = task
            enter(.reconnecting)
            return task
        }
        await task.value
    }

    /// Re-sends `initialize` with exponential backoff until a session is open or the connection closes.
    private func reinitialize() async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                let info = try await Self.initialize(
                    transport, clientInfo: clientInfo, timeout: min(timeout, .seconds(5)))
                session.withLock {
                    $0.serverInfo = info
                    $0.recovery = nil
                }
                enter(.connected)
                broadcast(.reconnected(info))
                return
            } catch .closed {
                break
            } catch .server(let error) where error.code == .invalidRequest {
                // Already initialized (an earlier, timed-out attempt got through, or the link
                // was only slow): start over so that every listener resyncs against one known session.
                _ = try? await Self.call(transport, method: Disconnect.name, params: nil, timeout: .seconds(2))
                try? await Task.sleep(for: Self.jittered(delay))
                delay = min(delay * 2, .seconds(5))
            } catch {
                // -32017 (the daemon is full) lands here too: retried, spread out.
                try? await Task.sleep(for: Self.jittered(delay))
                delay = min(delay * 2, .seconds(5))
            }
        }
        session.withLock { $0.recovery = nil }
    }

    /// `delay` spread over ±50 %: clients dropped together (a daemon restart) come back
    /// spread out, not in lockstep.
    static func jittered(_ delay: Duration) -> Duration { delay * Double.random(in: 0.5...1.5) }

    private func broadcast(_ event: ConnectionEvent) { events.yield(event) }

    /// Makes `new` the link's state, telling the state streams if it changed.
    private func enter(_ new: ConnectionState) {
        linkState.withLock { state in
            guard state != new else { return }
            state = new
            states.yield(new)
        }
    }

    // MARK: Plumbing

    private static func initialize(_ transport: ClientTransport, clientInfo: ImplementationInfo, timeout: Duration)
        async throws(DepotClientError) -> Initialize.Result
    {
        let params: JSONValue
        do {
            params = try JSONCoding.encode(Initialize.Parameters(clientInfo: clientInfo))
        } catch {
            throw .invalidResponse("could not encode initialize: \(error.message)")
        }
        let result = try await call(transport, method: Initialize.name, params: params, timeout: timeout)
        let info = try decode(Initialize.Result.self, result)
        transport.heartbeatInterval.withLock { $0 = info.heartbeatInterval }
        transport.maxMessageSize.withLock { $0 = info.capabilities["maxMessageSize"]?.intValue ?? 0 }
        return info
    }

    private static func call(
        _ transport: ClientTransport, id: RequestID? = nil, method: String, params: JSONValue?, timeout: Duration
    ) async throws(DepotClientError) -> JSONValue {
        let id = id ?? transport.makeID()
        let result: Result<JSONValue, DepotClientError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                transport.request(id: id, method: method, params: params, timeout: timeout) {
                    continuation.resume(returning: $0)
                }
            }
        } onCancel: {
            transport.send(Message.notification(method: CancelRequest.name, params: ["id": id.json]).encoded)
        }
        return try result.get()
    }

    /// Calls `method` and blocks the calling thread until the answer comes (batch
    /// faulting from synchronous accessors; the answer arrives on the I/O thread,
    /// so this never waits on the caller's own executor).
    func callBlocking<M: Method>(_ method: M.Type, _ params: M.Parameters) throws(DepotClientError) -> M.Result {
        let json: JSONValue
        do {
            json = try JSONCoding.encode(params)
        } catch {
            throw .invalidResponse("could not encode params: \(error.message)")
        }
        let box = Mutex<Result<JSONValue, DepotClientError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        transport.request(id: transport.makeID(), method: M.name, params: json, timeout: timeout) { result in
            box.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        let result = try box.withLock { $0 }!.get()
        return try Self.decode(M.Result.self, result)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ value: JSONValue) throws(DepotClientError) -> T {
        do {
            return try JSONCoding.decode(T.self, from: value, field: "result")
        } catch {
            throw .invalidResponse(error.message)
        }
    }
}
