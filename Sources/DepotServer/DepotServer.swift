import DepotProtocol
import DepotStore
import Foundation
import Logging
import ZeroMQ

/// The Depot daemon: a ``DepotService`` core behind a ZeroMQ ROUTER.
///
/// It owns what the core does not: the data directory and its lock, the store
/// file, the bound endpoints and the transport thread (`Transport/`), whose
/// frames it hands to the core and whose sends serve as the core's ``Outbox``.
public final class DepotServer: Sendable {
    /// The configuration it runs with.
    public let configuration: ServerConfiguration
    /// The store it serves.
    public var store: Store { service.store }
    /// The transport-free core that serves every request.
    public let service: DepotService
    let logger: Logger
    let transport: RouterTransport
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
        var configuration = configuration
        self.logger = logger
        let directory = configuration.dataDirectory
        try Self.makeDirectory(directory.path)
        lock = try DataDirectoryLock(directory: directory)
        let store: Store
        do {
            store = try Store(
                path: directory.appendingPathComponent("depot.sqlite").path,
                historyRetention: configuration.historyRetention, queryTimeLimit: configuration.maxQuerySeconds,
                replication: configuration.replication)
        } catch {
            throw ConfigurationError(
                description: "cannot open the store in \(directory.path): \(error.message)")
        }
        if let format = store.upgradedFromFormat {
            logger.notice(
                "upgraded the data directory \(directory.path) from data format \(format) to \(Store.dataFormat)")
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
            let policy = try configuration.policyFile.map { (path) throws(ConfigurationError) in
                try AccessPolicy(contentsOf: path)
            }
            let authorized = try AuthorizedKeys(
                contentsOf: keysFile, policy: policy ?? AccessPolicy(), schema: store.schema)
            // History records the values the read rules read, so that store/history of a scoped key is exact.
            store.recordScopeValues(of: HistoryScope.recordedKeys(of: authorized.keys.values.compactMap(\.scope)))
            let ring = KeyRing(authorized)
            security = TransportSecurity(secretKey: secretKey, keys: ring)
            logger.info("CURVE on tcp endpoints: \(ring.count) authorized key(s) from \(keysFile)")
        }
        do {
            transport = try RouterTransport(
                endpoints: configuration.effectiveEndpoints, maxMessageSize: configuration.maxMessageSize,
                sendHighWaterMark: configuration.sendHighWaterMark, security: security,
                backlog: Int32(clamping: configuration.listenBacklog),
                ioThreads: Int32(clamping: configuration.ioThreads),
                logger: logger)
        } catch {
            throw ConfigurationError(description: "cannot listen: \(error)")
        }
        try Self.fitSessions(to: OpenFileLimit.current(), in: &configuration, logger: logger)
        self.configuration = configuration
        do {
            service = try DepotService(
                configuration: configuration, store: store, outbox: transport, keys: security?.keys,
                endpoints: transport.boundEndpoints, logger: logger)
        } catch {
            throw ConfigurationError(description: "cannot read the store in \(directory.path): \(error.message)")
        }
        transport.delegate = self
        // What the replica applied while opening went to no one: nobody was subscribed yet.
        _ = store.takeCommittedTransactions()
        _ = store.takeRebuild()
    }

    /// The endpoint last bound, with the chosen port for `tcp://…:*`.
    public var boundEndpoint: String { transport.lastEndpoint }

    /// Every endpoint bound, with the chosen ports, in the order bound (plain ones first).
    public var boundEndpoints: [String] { transport.boundEndpoints }

    /// Starts serving on the transport thread.
    public func start() {
        transport.start()
        store.replication?.startFollowing(position: { [store] in store.replicaPosition }) { [service] in
            service.catchUpWithCluster()
        }
        logger.info(
            "depotd \(configuration.version) listening on \(configuration.effectiveEndpoints.joined(separator: ", "))")
    }

    /// Stops gracefully: cancels running requests, lets queued writes finish,
    /// sends what is queued, checkpoints the WAL and closes the socket.
    public func stop() {
        guard !service.isStopping else { return }
        logger.info("stopping")
        service.stop()
        store.replication?.stop()
        transport.stop()
        store.checkpoint()
        logger.info("stopped")
    }

    /// Re-reads the authorized-keys file and the policy (SIGHUP), closes at once
    /// every session whose key is no longer listed, and re-scopes the sessions
    /// of keys whose scope changed (their subscriptions are invalidated, reason
    /// `scope`); a file that does not parse leaves the keys and policy in force unchanged.
    ///
    /// - Returns: how many sessions were closed.
    @discardableResult
    public func reloadAuthorizedKeys() throws(ConfigurationError) -> Int {
        guard let keys = service.keys, let path = configuration.authorizedKeysFile else {
            throw ConfigurationError(description: "no --authorized-keys file to reload")
        }
        let policy = try configuration.policyFile.map { (path) throws(ConfigurationError) in
            try AccessPolicy(contentsOf: path)
        }
        let fresh = try AuthorizedKeys(contentsOf: path, policy: policy ?? AccessPolicy(), schema: store.schema)
        store.recordScopeValues(of: HistoryScope.recordedKeys(of: fresh.keys.values.compactMap(\.scope)))
        let (removed, rescoped) = keys.replace(with: fresh)
        let closed = service.closeSessions(ofKeys: removed, reason: "its key was removed from \(path)")
        let invalidated = service.rescope(keys: rescoped)
        logger.notice(
            "reloaded \(path): \(fresh.keys.count) key(s), \(removed.count) removed, \(closed) session(s) closed, \(rescoped.count) key(s) re-scoped, \(invalidated) subscription(s) invalidated"
        )
        return closed
    }
}

extension DepotServer {
    /// Lowers ``ServerConfiguration/maxSessions`` to what the open-file limit affords
    /// with what is open now (the store and the bound endpoints), saying so; refuses to
    /// start when it affords none.
    static func fitSessions(
        to limit: OpenFileLimit, in configuration: inout ServerConfiguration, logger: Logger
    ) throws(ConfigurationError) {
        configuration.openFileLimit = limit.soft == Int.max ? nil : limit.soft
        let servable = limit.sessionsServable(openNow: OpenFileLimit.openDescriptors)
        guard servable < configuration.maxSessions else { return }
        let hard = limit.hard == Int.max ? "unlimited" : String(limit.hard)
        guard servable >= 1 else {
            throw ConfigurationError(
                description:
                    "the open-file limit (\(limit.soft), hard \(hard)) leaves no descriptor for a client session; raise it (ulimit -n, LimitNOFILE=)"
            )
        }
        logger.warning(
            "--max-sessions \(configuration.maxSessions) needs about \(configuration.maxSessions + OpenFileLimit.spare) open files, more than the limit of \(limit.soft) (hard \(hard)) allows: serving at most \(servable) sessions; more get -32017. Raise the limit (ulimit -n, LimitNOFILE=) to serve more"
        )
        configuration.requestedMaxSessions = configuration.maxSessions
        configuration.maxSessions = servable
    }

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
    func transport(
        _ transport: RouterTransport, didReceive payload: [UInt8], from routingID: [UInt8], keyID: String?,
        moreWaiting: Bool
    ) {
        service.receive(payload, from: routingID, keyID: keyID, moreWaiting: moreWaiting)
    }

    func transport(_ transport: RouterTransport, peerVanished routingID: [UInt8]) {
        service.peerVanished(routingID)
    }

    func transport(_ transport: RouterTransport, didDrain routingID: [UInt8]) {
        service.peerDrained(routingID)
    }

    func transportDidTick(_ transport: RouterTransport) {
        service.tick()
    }
}

extension RouterTransport: Outbox {}
