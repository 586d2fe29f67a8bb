import DepotProtocol
import DepotStore
import Foundation
import Synchronization

/// The fetched-results engine: subscriptions, their shared result sets, and
/// the deltas each committed transaction makes to them (DESIGN.md §7).
///
/// After a commit the writer calls ``publish(_:server:)``: for each result set
/// whose entities the transaction touched, the changed rows (and rows reached
/// through relationships) are re-read with the set's predicate and sort
/// expressions (`WHERE id IN (changed)`), compared with the index, and turned
/// into section and object changes. Nothing re-runs the whole query.
final class ResultsEngine: Sendable {
    struct Subscription: Sendable {
        let id: String
        let routingID: [UInt8]
        let setKey: String
        var seq: Int64 = 0
        /// Deltas were dropped because the session's queue overflowed; a
        /// `results/didInvalidate` is owed once it drains.
        var overflowed = false
    }

    private struct State: Sendable {
        var sets: [String: ResultSet] = [:]
        var subscriptions: [String: Subscription] = [:]
        var nextID = 1
    }

    private let state = Mutex(State())

    // MARK: Subscribing

    /// `results/subscribe`: builds (or shares) the result set and registers the subscription.
    ///
    /// Reads the results on a reader at transaction T, then, on the writer
    /// queue, catches up with what committed after T (from history) before
    /// registering, so no transaction falls between the snapshot and the deltas.
    func subscribe(_ params: ResultsSubscribe.Parameters, context: RequestContext) throws(RPCError)
        -> ResultsSubscribe.Result
    {
        let store = context.store
        let definition = try ResultsDefinition(params, schema: store.schema)
        if let name = params.cacheName, name.isEmpty || name.count > 200 {
            throw .invalidParams(
                "cacheName must be 1 to 200 characters, got '\(name.prefix(40))'", field: "params.cacheName")
        }
        let existing = state.withLock { $0.sets[definition.key] != nil }
        var built: ResultSet?
        var fromCache = false
        if !existing {
            let set = ResultSet(
                key: definition.key, plan: definition.plan, shape: definition.plan.shape,
                sectioned: definition.sectioned,
                dependencies: definition.dependencies, rows: [], transaction: 0)
            if let name = params.cacheName, let cached = try store.loadResultsCache(name),
                cached.requestKey == definition.key
            {
                set.reset(rows: cached.rows, transaction: cached.transaction)
                fromCache = true
            } else {
                let progress = context.progress(token: params.workDoneToken)
                progress?.begin(title: "Subscribing to \(params.request.entity)", total: nil)
                let transaction = try store.keyedRows(
                    definition.plan, cancellation: context.cancellation,
                    expectedCount: { set.beginBuilding(expectedCount: $0) }
                ) { set.append($0) }
                set.finishBuilding(transaction: transaction)
                progress?.end(completed: Int64(set.index.count), cancelled: false)
                // The read's transient buffers were large: hand freed pages back to the system.
                if set.index.count > 100_000 { trimFreedMemory() }
            }
            built = set
        }
        let builtTransaction = built?.transaction
        let include = params.include ?? .firstBatch
        let firstBatch = max(1, params.request.batchSize ?? 50)
        let result: Result<Registration, RPCError> = context.server.dispatcher.writer.sync {
            Result { () throws(RPCError) in
                if let set = built { try self.catchUp(set, store: store) }
                let registration = try self.register(
                    built, key: definition.key, cacheName: params.cacheName, routingID: context.routingID
                ) { set in
                    switch include {
                    case .all: set.index.count
                    case .noObjects: 0
                    case .firstBatch: min(set.index.count, firstBatch)
                    }
                }
                if let name = params.cacheName, !fromCache || registration.transaction != builtTransaction {
                    try store.saveResultsCache(name, registration.cacheEntry())
                }
                return registration
            }
        }
        let registration = try result.get()
        let objects = try store.objects(rows: registration.firstIDs, shape: definition.plan.shape)
        return ResultsSubscribe.Result(
            subscription: registration.subscription, seq: 0, transaction: registration.transaction,
            count: registration.count,
            sections: registration.sections, objects: registration.firstIDs.map { objects[$0] ?? .null },
            fromCache: params.cacheName == nil ? nil : fromCache)
    }

    /// What a subscribe learned under the lock.
    private struct Registration {
        var subscription: String
        var transaction: Int64
        var count: Int
        var sections: [SectionInfo]
        var firstIDs: [Int64]
        var cacheEntry: () -> ResultsCacheEntry
    }

    /// On the writer queue: installs the set (or joins the shared one) and adds the subscription.
    private func register(
        _ built: ResultSet?, key: String, cacheName: String?, routingID: [UInt8], firstBatch: (ResultSet) -> Int
    ) throws(RPCError) -> Registration {
        try state.withLock { state throws(RPCError) in
            guard let set = state.sets[key] ?? built else {
                throw RPCError(code: .internalError, message: "the shared result set vanished; subscribe again")
            }
            if let cacheName { set.cacheName = cacheName }
            let id = "s\(state.nextID)"
            state.nextID += 1
            set.subscribers.insert(id)
            state.sets[key] = set
            state.subscriptions[id] = Subscription(id: id, routingID: routingID, setKey: key)
            let entry = set.cacheEntry
            return Registration(
                subscription: id, transaction: set.transaction, count: set.index.count, sections: set.sectionInfos,
                firstIDs: set.index.entries(in: 0..<firstBatch(set)).map(\.id), cacheEntry: { entry })
        }
    }

    /// Brings a set read at an older transaction up to the latest one, silently
    /// (writer queue, before the set is shared).
    private func catchUp(_ set: ResultSet, store: Store) throws(RPCError) {
        guard let changes = try store.changedRows(since: set.transaction) else {
            let transaction = try store.keyedRows(set.plan, expectedCount: { set.beginBuilding(expectedCount: $0) }) {
                set.append($0)
            }
            set.finishBuilding(transaction: transaction)
            return
        }
        if !changes.rows.isEmpty {
            let candidates = try candidateRows(
                entity: set.plan.entity, dependencies: set.dependencies, changedRows: changes.rows, store: store)
            let evaluated = try store.keyedRows(set.plan, among: Array(candidates))
            _ = set.apply(Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) }), touched: [:])
        }
        set.transaction = changes.latest
    }

    /// The rows of `entity` whose membership or position the change may affect.
    private func candidateRows(
        entity: EntitySchema, dependencies: [ResultSet.Dependency], changedRows: [String: Set<Int64>], store: Store
    ) throws(RPCError) -> Set<Int64> {
        var candidates = changedRows[entity.name] ?? []
        for dependency in dependencies {
            guard let changed = changedRows[dependency.entity], !changed.isEmpty else { continue }
            switch dependency {
            case .path(_, let path):
                candidates.formUnion(try store.rows(of: entity, reaching: Array(changed), through: path))
            case .owner(let name, let inverse):
                guard let destination = store.schema.entity(named: name) else { continue }
                candidates.formUnion(try store.owners(of: Array(changed), in: destination, through: inverse))
            case .any:
                // Every row now in the table; rows that left it were deleted, so they are in `changedRows`.
                candidates.formUnion(try store.allRows(of: entity))
            }
        }
        return candidates
    }

    // MARK: Reading

    /// Runs `body` on the subscription's set under the lock.
    private func withSubscription<T>(_ id: String, routingID: [UInt8], _ body: (Subscription, ResultSet) -> T)
        throws(RPCError) -> T
    {
        let found = state.withLock { state -> T? in
            guard let subscription = state.subscriptions[id], subscription.routingID == routingID,
                let set = state.sets[subscription.setKey]
            else { return nil }
            return body(subscription, set)
        }
        guard let found else { throw .notFound("no subscription '\(id)' in this session", id: id) }
        return found
    }

    /// `results/objects`.
    func objects(_ params: ResultsObjects.Parameters, context: RequestContext) throws(RPCError) -> ResultsObjects.Result
    {
        guard params.offset >= 0 else {
            throw .invalidParams("offset must not be negative, got \(params.offset)", field: "params.offset")
        }
        guard (0...100_000).contains(params.length) else {
            throw .invalidParams("length must be between 0 and 100000, got \(params.length)", field: "params.length")
        }
        let (seq, ids, shape) = try withSubscription(params.subscription, routingID: context.routingID) {
            subscription, set in
            let end = min(params.offset + params.length, set.index.count)
            let ids = params.offset < end ? set.index.entries(in: params.offset..<end).map(\.id) : []
            return (subscription.seq, ids, set.shape)
        }
        let objects = try context.store.objects(rows: ids, shape: shape)
        return ResultsObjects.Result(seq: seq, objects: ids.map { objects[$0] ?? .null })
    }

    /// `results/snapshot`.
    func snapshot(_ params: ResultsSnapshot.Parameters, context: RequestContext) throws(RPCError)
        -> ResultsSnapshot.Result
    {
        try withSubscription(params.subscription, routingID: context.routingID) { subscription, set in
            let entity = set.plan.entity.name
            return ResultsSnapshot.Result(
                seq: subscription.seq, transaction: set.transaction, sections: set.sectionInfos,
                ids: set.index.allEntries.map { "\(entity)/\($0.id)" })
        }
    }

    /// `results/unsubscribe`.
    func unsubscribe(_ id: String, routingID: [UInt8], server: DepotServer) throws(RPCError) {
        try withSubscription(id, routingID: routingID) { _, _ in }
        let freed = state.withLock { state in Self.remove(id, from: &state) }
        persist(freed.map { [$0] } ?? [], server: server)
    }

    /// Frees every subscription of a closed session.
    func removeSubscriptions(of routingID: [UInt8], server: DepotServer) {
        let freed = state.withLock { state in
            state.subscriptions.filter { $0.value.routingID == routingID }.keys.compactMap {
                Self.remove($0, from: &state)
            }
        }
        persist(freed, server: server)
    }

    /// Removes a subscription; returns its set when that was the last subscriber.
    private static func remove(_ id: String, from state: inout State) -> ResultSet? {
        guard let subscription = state.subscriptions.removeValue(forKey: id) else { return nil }
        state.sets[subscription.setKey]?.subscribers.remove(id)
        guard state.sets[subscription.setKey]?.subscribers.isEmpty == true else { return nil }
        return state.sets.removeValue(forKey: subscription.setKey)
    }

    /// Writes named caches of freed sets, on the writer queue (ordered with commits).
    private func persist(_ sets: [ResultSet], server: DepotServer) {
        let named = sets.filter { $0.cacheName != nil }
        guard !named.isEmpty else { return }
        server.dispatcher.writer.async {
            for set in named {
                try? server.store.saveResultsCache(set.cacheName!, set.cacheEntry)
            }
        }
    }

    /// Writes every live named cache (at shutdown, after the writer drained).
    func persistAll(store: Store) {
        let named = state.withLock { state in
            state.sets.values.compactMap { set in set.cacheName.map { ($0, set.cacheEntry) } }
        }
        for (name, entry) in named { try? store.saveResultsCache(name, entry) }
    }

    /// How many subscriptions and shared sets are live (for tests and logs).
    var counts: (subscriptions: Int, sets: Int) {
        state.withLock { ($0.subscriptions.count, $0.sets.count) }
    }

    /// The ids of every live subscription.
    var subscriptionIDs: Set<String> { state.withLock { Set($0.subscriptions.keys) } }

    /// Every shared set as `server/stats` reports it: its sharing key, row and
    /// section counts, transaction, cache name and its subscriptions' (id, session) pairs.
    func statistics() -> [SharedSetFigures] {
        state.withLock { state in
            state.sets.values.map { set in
                SharedSetFigures(
                    key: set.key, rows: set.index.count, sections: set.sectioned ? set.sections.count : 1,
                    transaction: set.transaction, cacheName: set.cacheName,
                    subscribers: set.subscribers.sorted().compactMap { id in
                        state.subscriptions[id].map { (id, $0.routingID) }
                    })
            }
        }
    }

    /// The most object changes one `results/didChange` carries; a transaction that
    /// changes more (a big batch) gets `results/didInvalidate {reason: "largeTransaction"}`.
    static let largestNotification = 10_000

    // MARK: Slow consumers

    /// Whether `subscription`'s deltas must be dropped: its session's queue is
    /// past the limit, or it already overflowed and owes a resync.
    private func overflow(_ subscription: Subscription, server: DepotServer) -> Bool {
        if subscription.overflowed { return true }
        guard server.isOverflowing(subscription.routingID) else { return false }
        state.withLock { $0.subscriptions[subscription.id]?.overflowed = true }
        server.logger.notice(
            "subscription \(subscription.id) overflowed its session's queue; deltas stop until it drains")
        return true
    }

    /// After a session's queue drained: tells each of its overflowed
    /// subscriptions to resync (`results/didInvalidate`, reason `overflow`).
    func sendInvalidations(to routingID: [UInt8], server: DepotServer) {
        let owed = state.withLock { state in
            let ids = state.subscriptions.values.filter { $0.routingID == routingID && $0.overflowed }.map(\.id)
            for id in ids { state.subscriptions[id]?.overflowed = false }
            return ids
        }
        for id in owed.sorted() {
            server.notify(ResultsDidInvalidate.self, .init(subscription: id, reason: "overflow"), to: routingID)
        }
    }

    // MARK: Publishing

    /// Sends each affected subscription its `results/didChange` for `transaction`
    /// (writer queue, right after the commit).
    func publish(_ transaction: CommittedTransaction, server: DepotServer) {
        let sets = state.withLock { state in
            state.sets.values.filter { set in
                transaction.changes[set.plan.entity.name] != nil
                    || set.dependencies.contains { transaction.changes[$0.entity] != nil }
            }
        }
        let store = server.store
        let changedRows = transaction.changes.mapValues { Set($0.allRows) }
        for set in sets {
            let entity = set.plan.entity
            do {
                let candidates = try candidateRows(
                    entity: entity, dependencies: set.dependencies, changedRows: changedRows, store: store)
                let evaluated = try store.keyedRows(set.plan, among: Array(candidates))
                var touched: [Int64: Set<String>] = [:]
                for update in transaction.changes[entity.name]?.updated ?? [] { touched[update.row] = update.keys }
                // Applied under the lock: a subscribe may be joining the set, a reader paging it.
                let (delta, receivers) = state.withLock { state -> (ResultSet.Delta, [Subscription]) in
                    guard state.sets[set.key] === set else { return (ResultSet.Delta(), []) }
                    let delta = set.apply(
                        Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) }), touched: touched)
                    set.transaction = transaction.number
                    guard !delta.isEmpty else { return (delta, []) }
                    var receivers: [Subscription] = []
                    for id in set.subscribers.sorted() {
                        state.subscriptions[id]?.seq += 1
                        if let subscription = state.subscriptions[id] { receivers.append(subscription) }
                    }
                    return (delta, receivers)
                }
                guard !delta.isEmpty, !receivers.isEmpty else { continue }
                if delta.objects.count > Self.largestNotification {
                    // One notification carrying this many objects would be larger than resyncing.
                    for subscription in receivers {
                        server.notify(
                            ResultsDidInvalidate.self, .init(subscription: subscription.id, reason: "largeTransaction"),
                            to: subscription.routingID)
                    }
                    continue
                }
                let valued = delta.objects.filter { $0.type != .delete }.map(\.id)
                let objects = try store.objects(rows: valued, shape: set.shape)
                let changes = delta.objects.map { change in
                    ObjectChange(
                        type: change.type, indexPath: change.old, newIndexPath: change.new,
                        id: "\(entity.name)/\(change.id)",
                        object: change.type == .delete ? nil : objects[change.id])
                }
                for subscription in receivers {
                    guard !overflow(subscription, server: server) else { continue }
                    let params = ResultsDidChange.Parameters(
                        subscription: subscription.id, seq: subscription.seq, transaction: transaction.number,
                        sections: delta.sections, objects: changes)
                    server.notify(ResultsDidChange.self, params, to: subscription.routingID)
                }
            } catch {
                server.logger.error(
                    "fetched results for \(entity.name) could not follow transaction \(transaction.number): \(error)")
            }
        }
    }
}

extension ResultsEngine {
    /// `results/deleteCache`: removes a named cache, or every cache; live
    /// subscriptions keep running but no longer persist under that name.
    func deleteCache(_ name: String?, store: Store) throws(RPCError) {
        state.withLock { state in
            for set in state.sets.values where name == nil || set.cacheName == name {
                set.cacheName = nil
            }
        }
        try store.deleteResultsCache(name)
    }
}
