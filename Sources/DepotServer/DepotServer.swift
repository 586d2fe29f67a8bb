import DepotProtocol
import DepotStore
import Foundation
import Logging
import Synchronization
import ZeroMQ

/// The Depot daemon's core: a ZeroMQ ROUTER serving JSON-RPC over a ``Store``.
///
/// A request travels: ``RouterTransport`` (the socket's one thread) →
/// ``Dispatcher`` (parse, session rules, pick a queue) → a handler in
/// `Handlers/` → the store → the response back through the transport's outbox.
/// Commits publish `store/didSave` (and fetched-results deltas) from the
/// writer queue before the committing request's response is queued.
public final class DepotServer: Sendable {
    /// The configuration it runs with.
    public let configuration: ServerConfiguration
    /// The store it serves.
    public let store: Store
    let logger: Logger
    let sessions = SessionRegistry()
    let results = ResultsEngine()
    let stats = ServerStatistics()
    private let transport: RouterTransport
    private let dispatcherBox = Mutex<Dispatcher?>(nil)
    private let stopping = Atomic<Bool>(false)

    /// Opens the store in the data directory and binds the endpoints (nothing is served until ``start()``).
    public init(configuration: ServerConfiguration, logger: Logger = Logger(label: "depotd")) throws {
        try configuration.validate()
        self.configuration = configuration
        self.logger = logger
        let directory = configuration.dataDirectory
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        store = try Store(
            path: directory.appendingPathComponent("depot.sqlite").path,
            historyRetention: configuration.historyRetention)
        let socketPath = directory.appendingPathComponent("depot.sock").path
        if configuration.effectiveEndpoints.contains("ipc://" + socketPath) {
            // A socket file left by a daemon that was killed would make bind fail.
            try? FileManager.default.removeItem(atPath: socketPath)
        }
        transport = try RouterTransport(
            endpoints: configuration.effectiveEndpoints, maxMessageSize: configuration.maxMessageSize,
            sendHighWaterMark: configuration.sendHighWaterMark, logger: logger)
        var handlers = HandlerRegistry()
        Self.registerLifecycleHandlers(&handlers)
        Self.registerModelHandlers(&handlers)
        Self.registerStoreHandlers(&handlers)
        Self.registerResultsHandlers(&handlers)
        Self.registerBatchHandlers(&handlers)
        Self.registerStatsHandlers(&handlers)
        dispatcherBox.withLock { $0 = Dispatcher(server: self, handlers: handlers) }
        transport.delegate = self
    }

    /// The endpoint last bound, with the chosen port for `tcp://…:*`.
    public var boundEndpoint: String { transport.lastEndpoint }

    var dispatcher: Dispatcher { dispatcherBox.withLock { $0! } }

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// Starts serving on the transport thread.
    public func start() {
        transport.start()
        logger.info(
            "depotd \(configuration.version) listening on \(configuration.effectiveEndpoints.joined(separator: ", "))")
    }

    /// Stops gracefully: cancels running requests, lets queued writes finish,
    /// sends what is queued, checkpoints the WAL and closes the socket.
    public func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        logger.info("stopping")
        sessions.cancelAll()
        dispatcher.drain()
        results.persistAll(store: store)
        transport.stop()
        store.checkpoint()
        logger.info("stopped")
    }

    /// Queues `bytes` for the peer.
    func send(_ bytes: [UInt8], to routingID: [UInt8]) {
        transport.send(bytes, to: routingID)
    }

    /// Queues a notification for the peer.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters, to routingID: [UInt8]) {
        guard let bytes = try? JSONCoding.encodeBytes(params) else { return }
        send(MessageEncoder.notification(method: N.name, paramsJSON: bytes), to: routingID)
        stats.notificationSent(N.name, subscription: (params as? ResultsDidChange.Parameters)?.subscription)
    }

    /// Publishes a committed transaction to observers (writer queue, after commit).
    func publish(_ transaction: CommittedTransaction?) {
        guard let transaction else { return }
        let start = ContinuousClock.now
        let subscribed = results.counts.sets > 0
        results.publish(transaction, server: self)
        let delta = ContinuousClock.now - start
        ObservationCenter.publish(transaction, server: self)
        stats.recordPublish(total: ContinuousClock.now - start, delta: subscribed ? delta : nil)
    }

    func closeSession(_ routingID: [UInt8], reason: String) {
        results.removeSubscriptions(of: routingID, server: self)
        if let session = sessions.close(routingID) {
            logger.debug("session \(session.id) closed: \(reason)")
        }
    }
}

extension DepotServer: TransportDelegate {
    func transport(_ transport: RouterTransport, didReceive payload: [UInt8], from routingID: [UInt8]) {
        dispatcher.receive(payload, from: routingID)
    }

    func transport(_ transport: RouterTransport, peerVanished routingID: [UInt8]) {
        closeSession(routingID, reason: "peer vanished")
    }

    func transport(_ transport: RouterTransport, didDrain routingID: [UInt8]) {
        results.sendInvalidations(to: routingID, server: self)
    }

    /// How many messages wait for the peer beyond ZeroMQ's own queue.
    func outboundBacklog(of routingID: [UInt8]) -> Int {
        transport.backlogCount(for: routingID)
    }

    /// Whether the peer's outbound queue is past the slow-consumer limit.
    func isOverflowing(_ routingID: [UInt8]) -> Bool {
        transport.backlogCount(for: routingID) > configuration.sessionQueueLimit
    }

    func transportDidTick(_ transport: RouterTransport) {
        if stats.countedSubscriptions > results.counts.subscriptions {
            stats.forgetSubscriptions(except: results.subscriptionIDs)
        }
        let limit = Duration.milliseconds(Int64(configuration.heartbeatInterval * 3000))
        for session in sessions.expire(silentFor: limit) {
            results.removeSubscriptions(of: session.routingID, server: self)
            logger.debug("session \(session.id) expired after \(limit) of silence")
        }
    }
}
