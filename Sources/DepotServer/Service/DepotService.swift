import DepotProtocol
import DepotStore
import Dispatch
import Foundation
import Logging
import Synchronization

/// Where the service core puts what it sends: responses and notifications,
/// each for one peer, in the order it sends them.
///
/// The daemon's ROUTER transport is one; a test can record them instead, and
/// drive the whole core without a socket or a process.
public protocol Outbox: Sendable {
    /// Queues `bytes` for `peer`, after everything queued for it before.
    func send(_ bytes: [UInt8], to peer: [UInt8])
    /// Queues several messages, each for its peer, in order (a transaction's fan-out).
    func send(contentsOf messages: [(bytes: [UInt8], peer: [UInt8])])
    /// How many messages wait for `peer` beyond what the peer can take now (the slow-consumer policy reads it).
    func backlogCount(for peer: [UInt8]) -> Int
}

extension Outbox {
    /// One ``send(_:to:)`` after the other.
    public func send(contentsOf messages: [(bytes: [UInt8], peer: [UInt8])]) {
        for message in messages { send(message.bytes, to: message.peer) }
    }
}

/// Depot's service core, without a transport: it takes each peer's messages
/// (``receive(_:from:keyID:)``) and writes the responses and notifications to
/// an ``Outbox``.
///
/// A request travels: ``receive(_:from:keyID:)`` (parse, session rules, pick a
/// queue: `Dispatch/`) → a handler in `Handlers/` → the store → the response
/// into the outbox. Writes run on one writer (`Dispatch/WriteQueue`); what
/// they commit is published (`store/didSave`: `Observation/`, fetched-results
/// deltas: `Results/`) in the publish lane (`Dispatch/PublishLane`), off the
/// writer, before the committing request's response is queued.
public final class DepotService: Sendable {
    /// The configuration it runs with.
    public let configuration: ServerConfiguration
    /// The store it serves.
    public let store: Store
    let logger: Logger
    let outbox: any Outbox
    /// The client keys in force when CURVE is configured.
    let keys: KeyRing?
    let sessions = SessionRegistry()
    let results: ResultsEngine
    /// The `store/observe` observers, owned by the publish lane beside the results engine's subscriptions.
    let observers: ObserverLane
    let stats = ServerStatistics()
    let handlers: HandlerRegistry
    /// Reads run here, concurrently.
    let readers = DispatchQueue(label: "depot.reader", attributes: .concurrent)
    /// The single writer (group commit of queued saves) and its publish lane.
    let writes: WriteQueue
    /// Large messages are parsed here, off the transport thread, in each peer's order.
    let parser = DispatchQueue(label: "depot.parser")
    /// Peers with messages waiting on the parser queue, and how many.
    let deferredPeers = Mutex<[[UInt8]: Int]>([:])
    private let stopping = Atomic<Bool>(false)
    /// Whether a catch-up with the cluster waits for the writer already.
    let catchUpQueued = Atomic<Bool>(false)
    /// Whether the subscribers were told that the replica diverged from the cluster's log.
    let divergenceReported = Atomic<Bool>(false)
    /// The endpoints the transport bound, as `server/stats` reports them.
    let boundEndpoints: [String]

    /// A core serving `store`, sending through `outbox`.
    ///
    /// - Parameter keys: the authorized client keys when the transport authenticates peers (CURVE).
    public convenience init(
        configuration: ServerConfiguration, store: Store, outbox: any Outbox,
        logger: Logger = Logger(label: "depotd")
    ) throws(RPCError) {
        try self.init(
            configuration: configuration, store: store, outbox: outbox, keys: nil, endpoints: [], logger: logger)
    }

    /// A core serving `store` to the clients `keys` authorizes, each within its role and its policy
    /// scope (DESIGN.md §2): requests name their key with ``receive(_:from:keyID:moreWaiting:)``'s
    /// `keyID`, as the transport does after a CURVE handshake; a request without one is unscoped.
    public convenience init(
        configuration: ServerConfiguration, store: Store, outbox: any Outbox, keys: AuthorizedKeys,
        logger: Logger = Logger(label: "depotd")
    ) throws(RPCError) {
        // History records the values the read rules read, as the daemon does at start-up.
        store.recordScopeValues(of: HistoryScope.recordedKeys(of: keys.keys.values.compactMap(\.scope)))
        try self.init(
            configuration: configuration, store: store, outbox: outbox, keys: KeyRing(keys), endpoints: [],
            logger: logger)
    }

    init(
        configuration: ServerConfiguration, store: Store, outbox: any Outbox, keys: KeyRing?, endpoints: [String],
        logger: Logger
    ) throws(RPCError) {
        self.configuration = configuration
        boundEndpoints = endpoints
        self.store = store
        writes = WriteQueue(store: store)
        self.outbox = outbox
        self.keys = keys
        self.logger = logger
        let imaging = RowImageRequests(store: store)
        results = ResultsEngine(
            lane: writes.lane, store: store, publishedThrough: try store.latestTransaction(),
            imaging: { imaging.request($0, for: .results) })
        observers = ObserverLane(lane: writes.lane, imaging: { imaging.request($0, for: .observers) })
        var handlers = HandlerRegistry()
        Self.registerLifecycleHandlers(&handlers)
        Self.registerModelHandlers(&handlers)
        Self.registerStoreHandlers(&handlers)
        Self.registerResultsHandlers(&handlers)
        Self.registerBatchHandlers(&handlers)
        Self.registerStatsHandlers(&handlers)
        self.handlers = handlers
    }

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// Stops serving: cancels running requests, lets queued writes finish and
    /// writes every live named results cache. Messages received afterwards get
    /// -32800 (cancelled) for anything but inline methods.
    public func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        sessions.cancelAll()
        drain()
        results.persistAll(store: store)
    }

    // MARK: Peers

    /// The peer is gone (its sends fail): its session and subscriptions end.
    public func peerVanished(_ peer: [UInt8]) {
        closeSession(peer, reason: "peer vanished")
    }

    /// A peer whose backlog had built up took everything queued for it: owed invalidations go out.
    public func peerDrained(_ peer: [UInt8]) {
        results.sendInvalidations(to: peer, context: self)
    }

    /// Timers, about once a second: sessions silent for three heartbeats expire.
    public func tick() {
        if stats.countedSubscriptions > results.counts.subscriptions {
            results.forgetEndedSubscriptions(in: stats)
        }
        let limit = Duration.milliseconds(Int64(configuration.heartbeatInterval * 3000))
        for session in sessions.expire(silentFor: limit) {
            results.removeSubscriptions(of: session.routingID, context: self)
            observers.removeObservers(of: session.routingID, context: self)
            logger.debug("session \(session.id) expired after \(limit) of silence")
        }
    }

    func closeSession(_ routingID: [UInt8], reason: String) {
        // Closed first: an observer registering meanwhile finds it closed, or is removed by the job below.
        let session = sessions.close(routingID)
        results.removeSubscriptions(of: routingID, context: self)
        observers.removeObservers(of: routingID, context: self)
        if let session { logger.debug("session \(session.id) closed: \(reason)") }
    }

    // MARK: Sending

    /// Queues `bytes` for the peer.
    func send(_ bytes: [UInt8], to routingID: [UInt8]) {
        outbox.send(bytes, to: routingID)
    }

    /// Queues a notification for the peer.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters, to routingID: [UInt8]) {
        guard let bytes = try? JSONCoding.encodeBytes(params) else { return }
        send(MessageEncoder.notification(method: N.name, paramsJSON: bytes), to: routingID)
        stats.notificationSent(N.name, subscription: (params as? ResultsDidChange.Parameters)?.subscription)
    }

    /// How many messages wait for the peer beyond ZeroMQ's own queue.
    func outboundBacklog(of routingID: [UInt8]) -> Int {
        outbox.backlogCount(for: routingID)
    }

    /// Whether the peer's outbound queue is past the slow-consumer limit.
    func isOverflowing(_ peer: [UInt8]) -> Bool {
        outbox.backlogCount(for: peer) > configuration.sessionQueueLimit
    }

    /// Publishes a committed transaction to observers and subscriptions (in the publish lane).
    func publish(_ transaction: CommittedTransaction, store: Result<Store, RPCError>?) {
        let start = ContinuousClock.now
        let reachedSets = results.publish(transaction, store: store, context: self)
        if reachedSets { stats.recordDelta(ContinuousClock.now - start) }
        observers.publish(transaction, store: try? store?.get(), countsCommit: !reachedSets, context: self)
    }

    /// Closes at once every session opened with one of `keyIDs` (their keys were removed).
    func closeSessions(ofKeys keyIDs: Set<String>, reason: String) -> Int {
        let closing = sessions.routingIDs(ofKeys: keyIDs)
        for routingID in closing { closeSession(routingID, reason: reason) }
        return closing.count
    }

    /// Re-scopes the sessions of keys whose scope changed (SIGHUP): their
    /// subscriptions of an entity whose rules changed are ended with
    /// `results/didInvalidate {reason: "scope"}`; their observers read what
    /// they see again with the new scope; other requests see the new scope at
    /// once. Returns how many subscriptions were ended.
    func rescope(keys changed: [String: Set<String>]) -> Int {
        var ended = 0
        for (keyID, entities) in changed where !entities.isEmpty {
            let routingIDs = sessions.routingIDs(ofKeys: [keyID])
            guard !routingIDs.isEmpty else { continue }
            // Scoped observers read their baseline again with the new scope, in commit order (queued
            // before the invalidations go out, so a save sent after one is judged by the new scope).
            // A key that lost its scope keeps the old one there (narrower, never wider).
            observers.rescope(routingIDs, scope: keys?.key(keyID)?.scope, context: self)
            ended += results.rescope(routingIDs, changed: { _, entity in entities.contains(entity) }, context: self)
        }
        return ended
    }
}

extension DepotService {
    /// Applies, as a write in order with this daemon's own, what other
    /// daemons of the cluster committed, and publishes it (deltas,
    /// `store/didSave`) like a local commit. The cluster's follower calls it
    /// on every hint; hints that arrive while one waits are folded into it.
    public func catchUpWithCluster() {
        guard store.isReplicated, !isStopping, !catchUpQueued.exchange(true, ordering: .acquiringAndReleasing) else {
            return
        }
        let entry = WriteQueue.Entry(
            groupable: false,
            run: { [self] _ in
                catchUpQueued.store(false, ordering: .releasing)
                do {
                    try store.catchUpWithCluster()
                } catch {
                    // The follower hints again once PostgreSQL answers; nothing is skipped meanwhile.
                    // A replica that diverged never catches up: its subscribers are told, once.
                    logger.error("cannot catch up with the cluster: \(error)")
                    if store.divergenceError != nil, !divergenceReported.exchange(true, ordering: .relaxed) {
                        results.invalidateAll(reason: "error", context: self)
                    }
                }
                return nil
            }, send: { _ in }, failure: { _ in [] })
        writes.enqueue(entry, subscriber: self)
    }
}

extension DepotService: CommitSubscriber {
    var publishingReads: Bool { results.mayHaveSets || observers.mayRead }

    /// Whether a save may commit and be published on the thread that received it
    /// (``WriteQueue/enqueue(_:subscriber:runHereIfIdle:)``): publishing it reads nothing of the
    /// store (no live set or observer that reads, or sets and observers that all follow from the
    /// commit's row images), or at most a few rows of windows while the lane is idle, when the
    /// publish reads the store right there, at the commit, with no snapshot and no wait for a lane reader.
    var mayPublishWhereReceived: Bool {
        guard publishingReads else { return true }
        guard observers.followsFromImagesAlone else { return false }
        return results.followsFromImagesAlone || (results.readsAtMostWindows && writes.lane.isIdle)
    }

    func needsSnapshot(for transactions: [CommittedTransaction]) -> Bool {
        observers.needsSnapshot(for: transactions)
            || results.needsSnapshot(for: transactions, modelVersion: store.schema.version)
    }

    func storeWasRebuilt(_ store: Result<Store, RPCError>) {
        logger.warning("the replica rebuilt itself from the cluster's snapshot: every subscription resyncs")
        results.resyncAll(reason: "rebuilt", store: try? store.get(), context: self)
        divergenceReported.store(false, ordering: .relaxed)
    }
}
