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
    func subscribe(_ params: ResultsSubscribe.Parameters, context: RequestContext) throws(RPCError) -> ResultsSubscribe.Result {
        let store = context.store
        let definition = try ResultsDefinition(params, schema: store.schema)
        if let name = params.cacheName, name.isEmpty || name.count > 200 {
            throw .invalidParams("cacheName must be 1 to 200 characters, got '\(name.prefix(40))'", field: "params.cacheName")
        }
        let existing = state.withLock { $0.sets[definition.key] != nil }
        var built: ResultSet?
        var fromCache = false
        if !existing {
            var rows: [KeyedRow]
            var transaction: Int64
            if let name = params.cacheName, let cached = try store.loadResultsCache(name), cached.requestKey == definition.key {
                (rows, transaction) = (cached.rows, cached.transaction)
                fromCache = true
            } else {
                let progress = context.progress(token: params.workDoneToken)
                progress?.begin(title: "Subscribing to \(params.request.entity)", total: nil)
                (rows, transaction) = try store.keyedRows(definition.plan, cancellation: context.cancellation)
                progress?.end(completed: Int64(rows.count), cancelled: false)
            }
            built = ResultSet(
                key: definition.key, plan: definition.plan, shape: definition.plan.shape, sectioned: definition.sectioned,
                dependencies: definition.dependencies, rows: rows, transaction: transaction)
            built?.cacheName = params.cacheName
        }
        let result: Result<(Subscription, ResultSet), RPCError> = context.server.dispatcher.writer.sync {
            Result { () throws(RPCError) in
                let registered = try self.register(built, key: definition.key, cacheName: params.cacheName, routingID: context.routingID, store: store)
                if let name = params.cacheName, !fromCache || registered.1.transaction != built?.transaction {
                    try store.saveResultsCache(name, registered.1.cacheEntry)
                }
                return registered
            }
        }
        let (subscription, set) = try result.get()
        let include = params.include ?? .firstBatch
        let length: Int
        switch include {
        case .all: length = set.index.count
        case .noObjects: length = 0
        case .firstBatch: length = min(set.index.count, max(1, params.request.batchSize ?? 50))
        }
        let objects = try page(set: set, subscription: subscription, offset: 0, length: length, store: store)
        return ResultsSubscribe.Result(
            subscription: subscription.id, seq: 0, transaction: set.transaction, count: set.index.count,
            sections: set.sectionInfos, objects: objects.objects, fromCache: params.cacheName == nil ? nil : fromCache)
    }

    /// On the writer queue: installs or catches up the set and adds the subscription.
    private func register(_ built: ResultSet?, key: String, cacheName: String?, routingID: [UInt8], store: Store) throws(RPCError) -> (Subscription, ResultSet) {
        if var set = built {
            try catchUp(&set, store: store)
            return state.withLock { state in
                if let shared = state.sets[key] { set = shared }
                if let cacheName { set.cacheName = cacheName }
                let id = "s\(state.nextID)"
                state.nextID += 1
                set.subscribers.insert(id)
                state.sets[key] = set
                let subscription = Subscription(id: id, routingID: routingID, setKey: key)
                state.subscriptions[id] = subscription
                return (subscription, set)
            }
        }
        return try state.withLock { state throws(RPCError) in
            guard var set = state.sets[key] else {
                throw RPCError(code: .internalError, message: "the shared result set vanished; subscribe again")
            }
            if let cacheName { set.cacheName = cacheName }
            let id = "s\(state.nextID)"
            state.nextID += 1
            set.subscribers.insert(id)
            state.sets[key] = set
            let subscription = Subscription(id: id, routingID: routingID, setKey: key)
            state.subscriptions[id] = subscription
            return (subscription, set)
        }
    }

    /// Brings a set read at an older transaction up to the latest one, silently.
    private func catchUp(_ set: inout ResultSet, store: Store) throws(RPCError) {
        guard let changes = try store.changedRows(since: set.transaction) else {
            let (rows, transaction) = try store.keyedRows(set.plan)
            set = ResultSet(key: set.key, plan: set.plan, shape: set.shape, sectioned: set.sectioned, dependencies: set.dependencies, rows: rows, transaction: transaction)
            return
        }
        if !changes.rows.isEmpty {
            let candidates = try candidateRows(for: set, changedRows: changes.rows, store: store)
            let evaluated = try store.keyedRows(set.plan, among: Array(candidates))
            _ = set.apply(Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) }), touched: [:])
        }
        set.transaction = changes.latest
    }

    /// The rows of the set's entity whose membership or position the change may affect.
    private func candidateRows(for set: ResultSet, changedRows: [String: Set<Int64>], store: Store) throws(RPCError) -> Set<Int64> {
        var candidates = changedRows[set.plan.entity.name] ?? []
        for dependency in set.dependencies {
            guard let changed = changedRows[dependency.entity], !changed.isEmpty else { continue }
            switch dependency {
            case .path(_, let path):
                candidates.formUnion(try store.rows(of: set.plan.entity, reaching: Array(changed), through: path))
            case .any:
                candidates.formUnion(try store.allRows(of: set.plan.entity))
                candidates.formUnion(set.index.allEntries.map(\.id))
            }
        }
        return candidates
    }

    // MARK: Reading

    private func page(set: ResultSet, subscription: Subscription, offset: Int, length: Int, store: Store) throws(RPCError) -> ResultsObjects.Result {
        var index = set.index
        let entries = index.entries(in: offset..<min(offset + length, index.count))
        let objects = try store.objects(rows: entries.map(\.id), shape: set.shape)
        return ResultsObjects.Result(seq: subscription.seq, objects: entries.map { objects[$0.id] ?? .null })
    }

    private func lookup(_ id: String, routingID: [UInt8]) throws(RPCError) -> (Subscription, ResultSet) {
        let found = state.withLock { state -> (Subscription, ResultSet)? in
            guard let subscription = state.subscriptions[id], subscription.routingID == routingID,
                let set = state.sets[subscription.setKey]
            else { return nil }
            return (subscription, set)
        }
        guard let found else { throw .notFound("no subscription '\(id)' in this session", id: id) }
        return found
    }

    /// `results/objects`.
    func objects(_ params: ResultsObjects.Parameters, context: RequestContext) throws(RPCError) -> ResultsObjects.Result {
        guard params.offset >= 0 else { throw .invalidParams("offset must not be negative, got \(params.offset)", field: "params.offset") }
        guard (0...100_000).contains(params.length) else {
            throw .invalidParams("length must be between 0 and 100000, got \(params.length)", field: "params.length")
        }
        let (subscription, set) = try lookup(params.subscription, routingID: context.routingID)
        return try page(set: set, subscription: subscription, offset: params.offset, length: params.length, store: context.store)
    }

    /// `results/snapshot`.
    func snapshot(_ params: ResultsSnapshot.Parameters, context: RequestContext) throws(RPCError) -> ResultsSnapshot.Result {
        let (subscription, set) = try lookup(params.subscription, routingID: context.routingID)
        let entity = set.plan.entity.name
        return ResultsSnapshot.Result(
            seq: subscription.seq, transaction: set.transaction, sections: set.sectionInfos,
            ids: set.index.allEntries.map { "\(entity)/\($0.id)" })
    }

    /// `results/unsubscribe`.
    func unsubscribe(_ id: String, routingID: [UInt8], server: DepotServer) throws(RPCError) {
        _ = try lookup(id, routingID: routingID)
        let freed = state.withLock { state in Self.remove(id, from: &state) }
        persist(freed.map { [$0] } ?? [], server: server)
    }

    /// Frees every subscription of a closed session.
    func removeSubscriptions(of routingID: [UInt8], server: DepotServer) {
        let freed = state.withLock { state in
            state.subscriptions.filter { $0.value.routingID == routingID }.keys.compactMap { Self.remove($0, from: &state) }
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
        let named = state.withLock { $0.sets.values.filter { $0.cacheName != nil } }
        for set in named { try? store.saveResultsCache(set.cacheName!, set.cacheEntry) }
    }

    /// How many subscriptions and shared sets are live (for tests and logs).
    var counts: (subscriptions: Int, sets: Int) {
        state.withLock { ($0.subscriptions.count, $0.sets.count) }
    }

    // MARK: Slow consumers

    /// Whether `subscription`'s deltas must be dropped: its session's queue is
    /// past the limit, or it already overflowed and owes a resync.
    private func overflow(_ subscription: Subscription, server: DepotServer) -> Bool {
        if subscription.overflowed { return true }
        guard server.isOverflowing(subscription.routingID) else { return false }
        state.withLock { $0.subscriptions[subscription.id]?.overflowed = true }
        server.logger.notice("subscription \(subscription.id) overflowed its session's queue; deltas stop until it drains")
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
                transaction.changes[set.plan.entity.name] != nil || set.dependencies.contains { transaction.changes[$0.entity] != nil }
            }
        }
        let store = server.store
        for var set in sets {
            do {
                let changedRows = transaction.changes.mapValues { Set($0.allRows) }
                let candidates = try candidateRows(for: set, changedRows: changedRows, store: store)
                let evaluated = try store.keyedRows(set.plan, among: Array(candidates))
                var touched: [Int64: Set<String>] = [:]
                for update in transaction.changes[set.plan.entity.name]?.updated ?? [] { touched[update.row] = update.keys }
                let key = set.key
                // Apply under the lock to the current version of the set (another subscribe may have joined).
                let applied = state.withLock { state -> (ResultSet.Delta, [Subscription])? in
                    guard var current = state.sets[key] else { return nil }
                    let delta = current.apply(Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) }), touched: touched)
                    current.transaction = transaction.number
                    var receivers: [Subscription] = []
                    if !delta.isEmpty {
                        for id in current.subscribers {
                            state.subscriptions[id]?.seq += 1
                            if let subscription = state.subscriptions[id] { receivers.append(subscription) }
                        }
                    }
                    state.sets[key] = current
                    set = current
                    return (delta, receivers)
                }
                guard let (delta, receivers) = applied, !delta.isEmpty else { continue }
                let valued = delta.objects.filter { $0.type != .delete }.map(\.id)
                let objects = try store.objects(rows: valued, shape: set.shape)
                let entity = set.plan.entity.name
                let changes = delta.objects.map { change in
                    ObjectChange(
                        type: change.type, indexPath: change.old, newIndexPath: change.new, id: "\(entity)/\(change.id)",
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
                server.logger.error("fetched results for \(set.plan.entity.name) could not follow transaction \(transaction.number): \(error)")
            }
        }
    }
}

extension ResultsEngine {
    /// `results/deleteCache`: removes a named cache, or every cache; live
    /// subscriptions keep running but no longer persist under that name.
    func deleteCache(_ name: String?, store: Store) throws(RPCError) {
        state.withLock { state in
            for (key, set) in state.sets where name == nil || set.cacheName == name {
                state.sets[key]?.cacheName = nil
            }
        }
        try store.deleteResultsCache(name)
    }
}
