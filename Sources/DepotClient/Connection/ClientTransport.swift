import DepotProtocol
import Foundation
import Synchronization
import ZeroMQ

/// The client's socket loop: one thread owns the DEALER socket (and its
/// monitor); calls post frames through a ``Mailbox`` and wait for their
/// responses by id.
final class ClientTransport: @unchecked Sendable {
    // @unchecked: `socket` and `monitor` are touched only on the I/O thread; the rest is locked or atomic.
    typealias Completion = @Sendable (Result<JSONValue, DepotClientError>) -> Void

    /// What the I/O thread noticed about the link to the daemon.
    enum LinkEvent: Sendable {
        /// The connection dropped; pending calls were failed with ``DepotClientError/connectionLost(method:)``.
        case disconnected
        /// The connection is up again after a drop: the daemon's session is gone.
        case reconnected
        /// Nothing came from the daemon for three heartbeat intervals.
        case silent
    }

    private struct Pending {
        var method: String
        var deadline: ContinuousClock.Instant
        var timeout: Duration
        var completion: Completion
    }

    private let context: Context
    private let socket: Socket
    private let monitor: Socket
    private let outbox = Mailbox<[UInt8]>()
    private let pending = Mutex<[RequestID: Pending]>([:])
    private let notificationBroadcaster = Broadcaster<ServerNotification>()
    private let nextID = Atomic<Int64>(1)
    private let stopRequested = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let lastSent = Mutex(ContinuousClock.now)
    /// Seconds between heartbeats; 0 until `initialize` tells the interval.
    let heartbeatInterval = Mutex<Double>(0)
    /// The daemon's `capabilities.maxMessageSize`; 0 until `initialize` tells it.
    let maxMessageSize = Mutex<Int64>(0)
    /// Called on the I/O thread when the link changes; set once, before use.
    let onLinkEvent = Mutex<(@Sendable (LinkEvent) -> Void)?>(nil)
    private let lastReceived = Mutex(ContinuousClock.now)
    /// The bytes of every frame received from the daemon so far.
    let bytesReceived = Atomic<Int64>(0)
    /// Where the partial-result chunks of streamed fetches go, by token (``partialResults(token:)``).
    private let partialResultSinks = Mutex<[String: AsyncStream<PartialResultChunk>.Continuation]>([:])
    /// How many sinks there are: without any, no frame is scanned for a chunk.
    private let partialResultSinkCount = Atomic<Int>(0)

    init(endpoint: String, keys: ClientKeys? = nil) throws(ZMQError) {
        context = try Context()
        socket = try Socket(context: context, type: .dealer)
        if let keys {
            try socket.setCurveClient(serverKey: keys.serverKey, keyPair: keys.keyPair)
        }
        try socket.setLinger(milliseconds: 0)
        try socket.setSendHighWaterMark(0)
        try socket.setReceiveHighWaterMark(0)
        // libzmq adds a random jitter of up to one interval to each retry and doubles the
        // interval up to the maximum: a restarted daemon is not hit by every client at once.
        try socket.setReconnectInterval(milliseconds: 100)
        try socket.setReconnectIntervalMax(milliseconds: 1000)
        // The monitor tells a daemon restart apart from silence: ZeroMQ reconnects
        // by itself, but the new daemon knows nothing of this session.
        let monitorEndpoint = "inproc://depot-client-monitor-\(UUID().uuidString)"
        try socket.monitor(monitorEndpoint)
        monitor = try Socket(context: context, type: .pair)
        try monitor.connect(monitorEndpoint)
        try socket.connect(endpoint)
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "depot-client"
        thread.start()
    }

    /// A fresh request id.
    func makeID() -> RequestID { .number(nextID.wrappingAdd(1, ordering: .relaxed).oldValue) }

    /// Sends a request; `completion` runs on the I/O thread with the result or error.
    func request(id: RequestID, method: String, params: JSONValue?, timeout: Duration, completion: @escaping Completion)
    {
        guard !stopRequested.load(ordering: .relaxed) else { return completion(.failure(.closed)) }
        let bytes = Message.request(id: id, method: method, params: params).encoded
        let limit = maxMessageSize.withLock { $0 }
        if limit > 0 && bytes.count > limit {
            // libzmq would drop the whole connection on it and no answer would ever come.
            return completion(
                .failure(
                    .transport(
                        ZMQError(
                            code: EMSGSIZE,
                            operation:
                                "\(method) not sent: the message is \(bytes.count) bytes, over the daemon's maxMessageSize of \(limit) (split it, e.g. smaller batches)"
                        ))))
        }
        pending.withLock {
            $0[id] = Pending(method: method, deadline: .now + timeout, timeout: timeout, completion: completion)
        }
        outbox.post(bytes)
    }

    /// Fails every pending call with `error`.
    func failPending(with error: (String) -> DepotClientError) {
        let failed = pending.withLock { pending in
            defer { pending.removeAll() }
            return Array(pending.values)
        }
        failed.forEach { $0.completion(.failure(error($0.method))) }
    }

    /// Sends raw bytes (a notification, or a hand-made message in tests).
    func send(_ bytes: [UInt8]) { outbox.post(bytes) }

    /// A new stream of every notification from now on.
    func notifications() -> AsyncStream<ServerNotification> { notificationBroadcaster.stream() }

    /// A new stream of the `$/progress` partial-result chunks for `token`, as the bytes
    /// that came (never parsed into a ``JSONValue``, nor handed to ``notifications()``),
    /// until the stream's consumer stops listening or the transport stops.
    func partialResults(token: String) -> AsyncStream<PartialResultChunk> {
        let (stream, continuation) = AsyncStream.makeStream(of: PartialResultChunk.self, bufferingPolicy: .unbounded)
        partialResultSinks.withLock { sinks in
            sinks[token] = continuation
            partialResultSinkCount.store(sinks.count, ordering: .relaxed)
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            partialResultSinks.withLock { sinks in
                sinks[token] = nil
                partialResultSinkCount.store(sinks.count, ordering: .relaxed)
            }
        }
        return stream
    }

    /// Whether ``stop()`` was called.
    var isStopped: Bool { stopRequested.load(ordering: .relaxed) }

    /// Stops the loop, failing pending calls with ``DepotClientError/closed``.
    func stop() {
        guard !stopRequested.exchange(true, ordering: .relaxed) else { return }
        outbox.wake()
        finished.wait()
        let failed = pending.withLock { pending in
            let all = pending.values
            pending.removeAll()
            return Array(all)
        }
        failed.forEach { $0.completion(.failure(.closed)) }
        notificationBroadcaster.finish()
        // Finished outside the lock: finishing runs onTermination, which takes it.
        let sinks = partialResultSinks.withLock { Array($0.values) }
        sinks.forEach { $0.finish() }
    }

    private func run() {
        var poller = Poller()
        let socketIndex = poller.add(socket)
        let wakeIndex = poller.add(fileDescriptor: outbox.wakeDescriptor)
        let monitorIndex = poller.add(monitor)
        var droppedSinceConnect = false
        // Requests the socket could not take yet (no peer: a handshake refused, the daemon gone).
        // Never a blocking send: this thread must go on reading the monitor, which says why.
        var unsent: [[UInt8]] = []
        while !stopRequested.load(ordering: .relaxed) {
            guard let ready = try? poller.poll(timeoutMilliseconds: 50) else { break }
            if ready[wakeIndex].contains(.readable) {
                unsent += outbox.drain()
                lastSent.withLock { $0 = .now }
            }
            while let bytes = unsent.first {
                // `false`: no peer takes it now, try again later; an error drops it, as before.
                if (try? socket.send(bytes, dontWait: true)) == false { break }
                unsent.removeFirst()
            }
            if ready[socketIndex].contains(.readable) {
                while let message = try? socket.receive(dontWait: true) {
                    lastReceived.withLock { $0 = .now }
                    if let frame = message.last { deliver(frame) }
                }
            }
            if ready[monitorIndex].contains(.readable) {
                while let message = try? monitor.receive(dontWait: true), let event = SocketEvent(message) {
                    switch event.kind {
                    case .disconnected:
                        droppedSinceConnect = true
                        // Their answers died with the old connection; they may or may not have run.
                        failPending { .connectionLost(method: $0) }
                        report(.disconnected)
                    case .connected where droppedSinceConnect:
                        droppedSinceConnect = false
                        lastReceived.withLock { $0 = .now }
                        report(.reconnected)
                    case .other(let number) where Self.handshakeFailures.contains(Int32(number)):
                        // CURVE: the server refused this key (ZAP 400), or the keys do not match.
                        failPending { method in
                            .server(
                                RPCError(
                                    code: .forbidden,
                                    message:
                                        "the server refused the CURVE handshake for \(method): this client's key is not authorized there, or the server key is wrong"
                                ))
                        }
                    case .connected, .other, .acceptFailed:
                        break
                    }
                }
            }
            expireAndBeat()
        }
        for bytes in outbox.drain() { _ = try? socket.send(bytes, dontWait: true) }
        monitor.close()
        socket.close()
        context.terminate()
    }

    /// `ZMQ_EVENT_HANDSHAKE_FAILED_*`: the security handshake failed.
    private static let handshakeFailures: Set<Int32> = [
        ZMQEvents.handshakeFailedAuth, ZMQEvents.handshakeFailedProtocol, ZMQEvents.handshakeFailedNoDetail,
    ]

    private func deliver(_ frame: [UInt8]) {
        bytesReceived.add(Int64(frame.count), ordering: .relaxed)
        // A streamed fetch's chunk goes to that fetch as bytes: it decodes the objects itself.
        if partialResultSinkCount.load(ordering: .relaxed) > 0, let (token, chunk) = PartialResultChunk.scan(frame),
            let sink = partialResultSinks.withLock({ $0[token] })
        {
            sink.yield(chunk)
            return
        }
        guard let json = try? JSONParser.parse(frame) else { return }
        let messages = json.arrayValue ?? [json]
        for element in messages {
            guard let message = try? Message.decode(element) else { continue }
            switch message {
            case .result(let id, let result):
                pending.withLock { $0.removeValue(forKey: id) }?.completion(.success(result))
            case .error(let id?, let error):
                pending.withLock { $0.removeValue(forKey: id) }?.completion(.failure(.server(error)))
            case .notification(let method, let params):
                let notification = ServerNotification(method: method, params: params ?? .object([:]))
                notificationBroadcaster.yield(notification)
            case .error(nil, _), .request:
                break
            }
        }
    }

    private func expireAndBeat() {
        let now = ContinuousClock.now
        let expired = pending.withLock { pending in
            let late = pending.filter { $0.value.deadline <= now }
            for id in late.keys { pending[id] = nil }
            return Array(late.values)
        }
        expired.forEach { $0.completion(.failure(.timedOut(method: $0.method, after: $0.timeout))) }
        let interval = heartbeatInterval.withLock { $0 }
        guard interval > 0 else { return }
        if now - lastReceived.withLock({ $0 }) > .milliseconds(Int64(interval * 3000)) {
            lastReceived.withLock { $0 = now }
            report(.silent)
        }
        guard now - lastSent.withLock({ $0 }) > .milliseconds(Int64(interval * 500)) else { return }
        // A ping keeps the session alive; its answer matches no pending call and is dropped.
        _ = try? socket.send(
            Message.request(id: .string("heartbeat"), method: Ping.name, params: nil).encoded, dontWait: true)
        lastSent.withLock { $0 = now }
    }

    private func report(_ event: LinkEvent) {
        onLinkEvent.withLock { $0 }?(event)
    }
}
