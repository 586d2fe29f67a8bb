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
    let results: ResultsEngine
    let stats = ServerStatistics()
    let transport: RouterTransport
    private let dispatcherBox = Mutex<Dispatcher?>(nil)
    private let stopping = Atomic<Bool>(false)
    /// The client keys in force when CURVE is configured.
    let keys: KeyRing?
    /// Held for the daemon's lifetime: a second daemon on the same directory is refused.
    private let lock: DataDirectoryLock

    /// Opens the store in the data directory, defines ``ServerConfiguration/model``
    /// and binds the endpoints (nothing is served until ``start()``).
    ///
    /// Every start-up failure is a ``ConfigurationError`` saying what and why, and
    /// happens before anything is bound: a model that cannot be defined, a data
    /// directory that cannot be created or is held by another daemon, an endpoint
    /// that cannot be bound.
    public init(configuration: ServerConfiguration, logger: Logger = Logger(label: "depotd")) throws(ConfigurationError)
    {
        try configuration.validate()
        self.configuration = configuration
        self.logger = logger
        let directory = configuration.dataDirectory
        try Self.makeDirectory(directory.path)
        lock = try DataDirectoryLock(directory: directory)
        do {
            store = try Store(
                path: directory.appendingPathComponent("depot.sqlite").path,
                historyRetention: configuration.historyRetention, queryTimeLimit: configuration.maxQuerySeconds)
        } catch {
            throw ConfigurationError(
                description: "cannot open the store in \(directory.path): \(error.message)")
        }
        if let model = configuration.model {
            do {
                let result = try store.defineModel(model)
                logger.info(
                    "model version \(result.version): \(result.changes.isEmpty ? "unchanged" : result.changes.joined(separator: ", "))"
                )
            } catch {
                throw ConfigurationError(description: "the model cannot be defined: \(error.message)")
            }
        }
        do {
            results = ResultsEngine(publishedThrough: try store.latestTransaction())
        } catch {
            throw ConfigurationError(description: "cannot read the store in \(directory.path): \(error.message)")
        }
        let socketPath = directory.appendingPathComponent("depot.sock").path
        if configuration.effectiveEndpoints.contains("ipc://" + socketPath) {
            // A socket file left by a daemon that was killed would make bind fail
            // (a running daemon holds the lock, so this is never a live socket).
            try? FileManager.default.removeItem(atPath: socketPath)
        }
        var security: TransportSecurity?
        if let secretKey = configuration.curveSecretKey, let keysFile = configuration.authorizedKeysFile {
            guard Curve.isAvailable else {
                throw ConfigurationError(
                    description: "this libzmq was built without CURVE (libsodium); keys cannot be used")
            }
            do {
                _ = try CurveKeyPair(secretKey: secretKey)
            } catch {
                throw ConfigurationError(description: "the CURVE secret key is not a Z85 secret key: \(error)")
            }
            let ring = KeyRing(try AuthorizedKeys(contentsOf: keysFile))
            security = TransportSecurity(secretKey: secretKey, keys: ring)
            logger.info("CURVE on tcp endpoints: \(ring.count) authorized key(s) from \(keysFile)")
        }
        keys = security?.keys
        do {
            transport = try RouterTransport(
                endpoints: configuration.effectiveEndpoints, maxMessageSize: configuration.maxMessageSize,
                sendHighWaterMark: configuration.sendHighWaterMark, security: security, logger: logger)
        } catch {
            throw ConfigurationError(description: "cannot listen: \(error)")
        }
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

    /// Every endpoint bound, with the chosen ports, in the order bound (plain ones first).
    public var boundEndpoints: [String] { transport.boundEndpoints }

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

    /// Re-reads the authorized-keys file (SIGHUP) and closes at once every
    /// session whose key is no longer listed; a file that does not parse leaves
    /// the keys in force unchanged.
    ///
    /// - Returns: how many sessions were closed.
    @discardableResult
    public func reloadAuthorizedKeys() throws(ConfigurationError) -> Int {
        guard let keys, let path = configuration.authorizedKeysFile else {
            throw ConfigurationError(description: "no --authorized-keys file to reload")
        }
        let fresh = try AuthorizedKeys(contentsOf: path)
        let removed = keys.replace(with: fresh)
        let closing = sessions.routingIDs(ofKeys: removed)
        for routingID in closing {
            closeSession(routingID, reason: "its key was removed from \(path)")
        }
        logger.notice(
            "reloaded \(path): \(fresh.keys.count) key(s), \(removed.count) removed, \(closing.count) session(s) closed"
        )
        return closing.count
    }

    func closeSession(_ routingID: [UInt8], reason: String) {
        results.removeSubscriptions(of: routingID, server: self)
        if let session = sessions.close(routingID) {
            logger.debug("session \(session.id) closed: \(reason)")
        }
    }
}

extension DepotServer {
    /// Creates `path` and its missing parents, mode 0700, saying which one failed and why.
    static func makeDirectory(_ path: String) throws(ConfigurationError) {
        var partial = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            partial += "/" + component
            var status = stat()
            if stat(partial, &status) == 0 {
                guard status.st_mode & S_IFMT == S_IFDIR else {
                    throw ConfigurationError(
                        description: "cannot create the data directory \(path): \(partial) is not a directory")
                }
                continue
            }
            guard mkdir(partial, 0o700) == 0 || errno == EEXIST else {
                throw ConfigurationError(
                    description:
                        "cannot create the data directory \(path): \(partial): \(String(cString: strerror(errno)))")
            }
        }
        guard access(path, W_OK | X_OK) == 0 else {
            throw ConfigurationError(
                description: "the data directory \(path) is not writable: \(String(cString: strerror(errno)))")
        }
    }
}

extension DepotServer: TransportDelegate {
    func transport(_ transport: RouterTransport, didReceive payload: [UInt8], from routingID: [UInt8], keyID: String?) {
        dispatcher.receive(payload, from: routingID, keyID: keyID)
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
