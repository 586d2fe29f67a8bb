import DepotProtocol
import DepotStore
import Foundation
import Synchronization

/// The fetched-results engine: subscriptions, their shared result sets, and
/// the deltas each committed transaction makes to them (DESIGN.md §7).
///
/// After a commit the publish lane calls ``publish(_:store:service:)`` with a
/// snapshot of the store right after it: for each result set
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
        /// Every set reflects every transaction up to this one.
        var publishedThrough: Int64 = 0
        /// A transaction's deltas are being applied and sent: sets may be ahead of their subscriptions' `seq`.
        var publishing = false
        /// Sets filed by their equality term: entity → key → value → set keys (``InMemoryFollow/equality``).
        var byEquality: [String: [String: [JSONValue: Set<String>]]] = [:]
        /// The other sets, under every entity whose changes can affect them (their own and their dependencies').
        var unfiled: [String: Set<String>] = [:]
        /// For each filed entity and key: the current value of every row whose value has a filed set,
        /// so that a row leaving a value reaches the sets of its old value without a search.
        var filedValues: [String: [String: [Int64: JSONValue]]] = [:]

        /// Installs `set` under `key`, filing it by its equality term or under its entities.
        mutating func install(_ set: ResultSet, key: String) {
            sets[key] = set
            let entity = set.plan.entity.name
            guard let (name, value) = set.inMemory?.equality else {
                for name in Set([entity] + set.dependencies.map(\.entity)) { unfiled[name, default: []].insert(key) }
                return
            }
            byEquality[entity, default: [:]][name, default: [:]][value, default: []].insert(key)
            var values = filedValues[entity]?[name] ?? [:]
            for entry in set.index.entries(in: 0..<set.index.count) { values[entry.id] = value }
            filedValues[entity, default: [:]][name] = values
        }

        /// Files anew the rows of the filed sets of `entities` (after their rows could not be read).
        mutating func refile(_ entities: [String]) {
            for entity in entities {
                filedValues[entity] = nil
                for setKey in (byEquality[entity] ?? [:]).values.flatMap(\.values).flatMap({ $0 }) {
                    guard let set = sets[setKey], let (name, value) = set.inMemory?.equality else { continue }
                    for entry in set.index.entries(in: 0..<set.index.count) {
                        filedValues[entity, default: [:]][name, default: [:]][entry.id] = value
                    }
                }
            }
        }

        /// Removes the set under `key` and its filing.
        mutating func uninstall(_ key: String) -> ResultSet? {
            guard let set = sets.removeValue(forKey: key) else { return nil }
            let entity = set.plan.entity.name
            guard let (name, value) = set.inMemory?.equality else {
                for name in Set([entity] + set.dependencies.map(\.entity)) {
                    unfiled[name]?.remove(key)
                    if unfiled[name]?.isEmpty == true { unfiled[name] = nil }
                }
                return set
            }
            byEquality[entity]?[name]?[value]?.remove(key)
            if byEquality[entity]?[name]?[value]?.isEmpty == true {
                byEquality[entity]?[name]?[value] = nil
                // No set of this value is left: its rows need no filing.
                for entry in set.index.entries(in: 0..<set.index.count)
                where filedValues[entity]?[name]?[entry.id] == value {
                    filedValues[entity]?[name]?[entry.id] = nil
                }
            }
            return set
        }
    }

    private let state = Mutex(State())
    /// Subscribes between their first read and their registration in the publish lane.
    private let registering = Atomic<Int>(0)
    /// Counts finished publishes, so that a reader can wait for the one in flight.
    private let publishes = PublishSignal()

    /// Starts with the store's newest transaction as the one every set reflects.
    init(publishedThrough: Int64) {
        state.withLock { $0.publishedThrough = publishedThrough }
    }

    // MARK: Subscribing

    /// `results/subscribe`: builds (or shares) the result set and registers the subscription.
    ///
    /// Reads the results on a reader at transaction T, then, on the writer
    /// queue, catches up with what committed after T (from history) before
    /// registering, so no transaction falls between the snapshot and the deltas.
    func subscribe(_ params: ResultsSubscribe.Parameters, context: RequestContext) throws(RPCError) -> [UInt8] {
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
                dependencies: definition.dependencies, rows: [], transaction: 0,
                coalesceMilliseconds: definition.coalesceMilliseconds, inMemory: definition.inMemory)
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
        // In the publish lane, after every commit so far was published, on a snapshot
        // of exactly that state: the set is caught up, the subscription registered,
        // the first batch read at that same transaction, and the answer queued
        // before any delta of a later transaction (DESIGN.md §7: the first didChange follows it).
        let service = context.service
        // Counted before the registration takes its place in the lane: a commit queued after it
        // is published with a snapshot even when no set is installed yet (``mayHaveSets``).
        registering.add(1, ordering: .sequentiallyConsistent)
        defer { registering.subtract(1, ordering: .sequentiallyConsistent) }
        let result: Result<[UInt8], RPCError> = service.writes.afterCommits { snapshot in
            Result { () throws(RPCError) in
                let store = try snapshot.get()
                if let set = built { try self.catchUp(set, store: store) }
                // A joining subscriber starts from the set as it is: announce an open window to the others first.
                if let shared = self.state.withLock({ $0.sets[definition.key] }), shared.coalescing != nil {
                    self.flush(shared, snapshot: snapshot, service: service)
                }
                let registration = try self.register(
                    built, key: definition.key, cacheName: params.cacheName, routingID: context.routingID
                ) { set in
                    switch include {
                    case .all: set.visibleCount
                    case .noObjects: 0
                    case .firstBatch: min(set.visibleCount, firstBatch)
                    }
                }
                if let name = params.cacheName, !fromCache || registration.transaction != builtTransaction {
                    // Written by the writer (a lane job never waits for it), before any later write.
                    let entry = registration.cacheEntry()
                    service.writes.async { self.saveCache(name, entry, service: service) }
                }
                let objects = try store.objects(rows: registration.firstIDs, shape: definition.plan.shape)
                let bytes = try JSONCoding.encodeBytes(
                    ResultsSubscribe.Result(
                        subscription: registration.subscription, seq: 0, transaction: registration.transaction,
                        count: registration.count, sections: registration.sections,
                        objects: registration.firstIDs.map { objects[$0] ?? .null },
                        fromCache: params.cacheName == nil ? nil : fromCache))
                return context.respondNow(bytes) ? [] : bytes
            }
        }
        return try result.get()
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
            if state.sets[key] !== set { state.install(set, key: key) }
            state.subscriptions[id] = Subscription(id: id, routingID: routingID, setKey: key)
            let entry = set.cacheEntry
            return Registration(
                subscription: id, transaction: set.transaction, count: set.visibleCount, sections: set.sectionInfos,
                firstIDs: set.visibleEntries(in: 0..<firstBatch(set)).map(\.id), cacheEntry: { entry })
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
            case .joined(_, let relationship):
                candidates.formUnion(try store.rows(of: entity, holding: Array(changed), through: relationship))
            case .any:
                // Every row now in the table; rows that left it were deleted, so they are in `changedRows`.
                candidates.formUnion(try store.allRows(of: entity))
            }
        }
        return candidates
    }

    // MARK: Reading

    /// `results/objects`: a consistent read at the `seq` it reports, answered
    /// in the session's stream where that `seq` says (DESIGN.md §7).
    ///
    /// Optimistic on a reader: inside one snapshot at transaction X, take the
    /// ids and `seq` only when every set reflects exactly X and no delta is
    /// half-sent, read the values from that snapshot, then answer under the
    /// lock if no later delta of the subscription went out meanwhile. A
    /// publish in the way means waiting for it and trying again; under a steady
    /// stream of commits the last try runs on the writer queue, where none can
    /// interleave.
    func objects(_ params: ResultsObjects.Parameters, context: RequestContext) throws(RPCError) -> [UInt8] {
        guard params.offset >= 0 else {
            throw .invalidParams("offset must not be negative, got \(params.offset)", field: "params.offset")
        }
        guard (0...100_000).contains(params.length) else {
            throw .invalidParams("length must be between 0 and 100000, got \(params.length)", field: "params.length")
        }
        return try answerInOrder(subscription: params.subscription, context: context) {
            (store) throws(RPCError) -> [UInt8]? in
            let attempt: Result<[UInt8]?, RPCError> = try store.readSnapshot { reader in
                let picked = self.state.withLock { state -> Result<(Int64, [Int64], ObjectShape)?, RPCError> in
                    guard let (subscription, set) = Self.lookup(params.subscription, context.routingID, in: state)
                    else {
                        return .failure(
                            .notFound(
                                "no subscription '\(params.subscription)' in this session", id: params.subscription))
                    }
                    guard !state.publishing, state.publishedThrough == reader.transaction, set.coalescing == nil else {
                        return .success(nil)
                    }
                    let ids = set.visibleEntries(in: params.offset..<params.offset + params.length).map(\.id)
                    return .success((subscription.seq, ids, set.shape))
                }
                guard case .success(let picked?) = picked else { return picked.map { _ in nil } }
                let (seq, ids, shape) = picked
                let objects = try reader.objects(rows: ids, shape: shape)
                let bytes = try JSONCoding.encodeBytes(
                    ResultsObjects.Result(seq: seq, objects: ids.map { objects[$0] ?? .null }))
                return .success(
                    self.state.withLock { state -> [UInt8]? in
                        // A later delta already queued would put this answer out of place: read again.
                        guard state.subscriptions[params.subscription]?.seq == seq else { return nil }
                        return context.respondNow(bytes) ? [] : bytes
                    })
            }
            return try attempt.get()
        }
    }

    /// `results/snapshot`, answered under the lock when no delta is half-sent, so it sits where its `seq` says.
    func snapshot(_ params: ResultsSnapshot.Parameters, context: RequestContext) throws(RPCError) -> [UInt8] {
        try answerInOrder(subscription: params.subscription, context: context) { _ throws(RPCError) -> [UInt8]? in
            let attempt = self.state.withLock { state -> Result<[UInt8]?, RPCError> in
                guard let (subscription, set) = Self.lookup(params.subscription, context.routingID, in: state) else {
                    return .failure(
                        .notFound("no subscription '\(params.subscription)' in this session", id: params.subscription))
                }
                guard !state.publishing, set.coalescing == nil else { return .success(nil) }
                let entity = set.plan.entity.name
                let result = ResultsSnapshot.Result(
                    seq: subscription.seq, transaction: max(set.transaction, state.publishedThrough),
                    sections: set.sectionInfos, ids: set.visibleEntries().map { "\(entity)/\($0.id)" })
                return Result { () throws(RPCError) in
                    let bytes = try JSONCoding.encodeBytes(result)
                    return context.respondNow(bytes) ? [] : bytes
                }
            }
            return try attempt.get()
        }
    }

    /// Runs `attempt` until it answers (non-`nil`): on the calling reader, after
    /// waiting out the publish in flight, then once in the publish lane, where
    /// the snapshot it reads is exactly the state every set reflects.
    private func answerInOrder(
        subscription: String, context: RequestContext, _ attempt: @escaping (Store) throws(RPCError) -> [UInt8]?
    ) throws(RPCError) -> [UInt8] {
        let service = context.service
        for _ in 0..<5 {
            let epoch = publishes.epoch
            if let bytes = try attempt(context.store) { return bytes }
            if hasOpenWindow(subscription) {
                // A coalescing window still open is announced first, in the lane.
                service.writes.afterCommits { self.flush(subscription: subscription, snapshot: $0, service: service) }
            } else {
                publishes.wait(after: epoch, timeout: 0.05)
            }
        }
        let last: Result<[UInt8]?, RPCError> = service.writes.afterCommits { snapshot in
            self.flush(subscription: subscription, snapshot: snapshot, service: service)
            return Result { () throws(RPCError) in try attempt(snapshot.get()) }
        }
        guard let bytes = try last.get() else {
            throw .internalError("the results could not be read consistently; resync with results/snapshot")
        }
        return bytes
    }

    /// Whether the set behind `subscription` has a coalescing window open.
    private func hasOpenWindow(_ subscription: String) -> Bool {
        state.withLock { state in
            state.subscriptions[subscription].flatMap { state.sets[$0.setKey] }?.coalescing != nil
        }
    }

    /// The subscription `id` of `routingID` and its set.
    private static func lookup(_ id: String, _ routingID: [UInt8], in state: State) -> (Subscription, ResultSet)? {
        guard let subscription = state.subscriptions[id], subscription.routingID == routingID,
            let set = state.sets[subscription.setKey]
        else { return nil }
        return (subscription, set)
    }

    /// `results/unsubscribe`.
    func unsubscribe(_ id: String, routingID: [UInt8], service: DepotService) throws(RPCError) {
        let freed = try state.withLock { state throws(RPCError) in
            guard Self.lookup(id, routingID, in: state) != nil else {
                throw .notFound("no subscription '\(id)' in this session", id: id)
            }
            return Self.remove(id, from: &state)
        }
        persist(freed.map { [$0] } ?? [], service: service)
    }

    /// Frees every subscription of a closed session.
    func removeSubscriptions(of routingID: [UInt8], service: DepotService) {
        let freed = state.withLock { state in
            state.subscriptions.filter { $0.value.routingID == routingID }.keys.compactMap {
                Self.remove($0, from: &state)
            }
        }
        persist(freed, service: service)
    }

    /// Removes a subscription; returns its set when that was the last subscriber.
    private static func remove(_ id: String, from state: inout State) -> ResultSet? {
        guard let subscription = state.subscriptions.removeValue(forKey: id) else { return nil }
        state.sets[subscription.setKey]?.subscribers.remove(id)
        guard state.sets[subscription.setKey]?.subscribers.isEmpty == true else { return nil }
        return state.uninstall(subscription.setKey)
    }

    /// Writes named caches of freed sets, on the writer queue (ordered with commits).
    private func persist(_ sets: [ResultSet], service: DepotService) {
        let named = sets.filter { $0.cacheName != nil }
        guard !named.isEmpty else { return }
        service.writes.async {
            for set in named { self.saveCache(set.cacheName!, set.cacheEntry, service: service) }
        }
    }

    /// Writes a named cache (writer queue); a failure is logged: the cache is
    /// an optimisation, and the next subscribe under that name reads afresh.
    private func saveCache(_ name: String, _ entry: ResultsCacheEntry, service: DepotService) {
        do {
            try service.store.saveResultsCache(name, entry)
        } catch {
            service.logger.error("could not write the results cache '\(name)': \(error.message)")
        }
    }

    /// Writes every live named cache (at shutdown, after the writer drained).
    func persistAll(store: Store) {
        let named = state.withLock { state in
            state.sets.values.compactMap { set in set.cacheName.map { ($0, set.cacheEntry) } }
        }
        for (name, entry) in named { try? store.saveResultsCache(name, entry) }
    }

    /// Whether a result set is live or a subscribe is on its way to registering one.
    var mayHaveSets: Bool {
        registering.load(ordering: .sequentiallyConsistent) > 0 || state.withLock { !$0.sets.isEmpty }
    }

    /// How many subscriptions and shared sets are live (for `server/stats`).
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

    /// Whether `subscription`'s deltas must be dropped (under the lock): its
    /// session's queue is past the limit, or it already overflowed and owes a resync.
    private func overflows(_ subscription: inout Subscription, service: DepotService) -> Bool {
        if subscription.overflowed { return true }
        guard service.isOverflowing(subscription.routingID) else { return false }
        subscription.overflowed = true
        service.logger.notice(
            "subscription \(subscription.id) overflowed its session's queue; deltas stop until it drains")
        return true
    }

    /// After a session's queue drained: tells each of its overflowed
    /// subscriptions to resync (`results/didInvalidate`, reason `overflow`).
    func sendInvalidations(to routingID: [UInt8], service: DepotService) {
        state.withLock { state in
            let ids = state.subscriptions.values.filter { $0.routingID == routingID && $0.overflowed }.map(\.id)
            for id in ids.sorted() {
                state.subscriptions[id]?.overflowed = false
                service.notify(ResultsDidInvalidate.self, .init(subscription: id, reason: "overflow"), to: routingID)
            }
        }
    }

    // MARK: Publishing

    /// Sends each affected subscription its `results/didChange` for `transaction`
    /// (publish lane, in commit order); returns whether any set could be affected.
    ///
    /// `store` reads the state right after the commit (or says why no snapshot
    /// was taken: the affected sets are then invalidated, never left behind).
    /// A set's delta is computed and its objects encoded once; each session's
    /// notification only adds its own `subscription` and `seq`. The `seq`
    /// increments and the sends happen under the lock, which is what lets the
    /// readers of ``objects(_:context:)`` and ``snapshot(_:context:)`` place
    /// their answers between two notifications and never among them.
    @discardableResult
    func publish(_ transaction: CommittedTransaction, store: Result<Store, RPCError>?, service: DepotService) -> Bool {
        // Only the sets the transaction can affect: the unfiled ones of its entities, and of
        // the filed ones those of the values its rows had or have (no pass over every set).
        let (unfiled, filing) = state.withLock { state in
            state.publishing = true
            var keys = Set<String>()
            var filing: [String: [String: [JSONValue: Set<String>]]] = [:]
            for entity in transaction.changes.keys {
                if let unfiled = state.unfiled[entity] { keys.formUnion(unfiled) }
                if let filed = state.byEquality[entity] { filing[entity] = filed }
            }
            return (keys.compactMap { state.sets[$0] }, filing)
        }
        defer {
            state.withLock { state in
                state.publishing = false
                state.publishedThrough = max(state.publishedThrough, transaction.number)
            }
            publishes.advance()
        }
        guard !unfiled.isEmpty || !filing.isEmpty else { return false }
        let snapshot: Store
        do {
            guard let store else { throw RPCError.internalError("no snapshot was taken for the commit") }
            snapshot = try store.get()
        } catch {
            // Nothing can be read: every set the transaction may touch resyncs from scratch.
            let filed = state.withLock { state in
                filing.values.flatMap(\.values).flatMap(\.values).flatMap { $0 }.compactMap { state.sets[$0] }
            }
            for set in unfiled + filed {
                service.logger.error(
                    "fetched results for \(set.plan.entity.name) could not follow transaction \(transaction.number): \(error); invalidating"
                )
                invalidate(set, reason: "error", store: nil, service: service)
            }
            return true
        }
        let changedRows = transaction.changes.mapValues { Set($0.allRows) }
        let touchedKeys = transaction.changes.mapValues { changes in
            Dictionary(changes.updated.map { ($0.row, $0.keys) }, uniquingKeysWith: { $0.union($1) })
        }
        var memory = InMemoryRows(store: snapshot, changedRows: changedRows)
        let (filed, unread) = narrowByEquality(transaction, filing: filing, memory: &memory, store: snapshot)
        defer { if !unread.isEmpty { state.withLock { $0.refile(unread) } } }
        for (set, only) in unfiled.map({ ($0, Set<Int64>?.none) }) + filed.map({ ($0.0, Optional($0.1)) }) {
            do {
                try follow(
                    set, transaction: transaction, changedRows: changedRows, touchedKeys: touchedKeys, only: only,
                    memory: &memory, store: snapshot, service: service)
            } catch {
                // Never a silent desync: the set is rebuilt and its subscribers told to resync.
                service.logger.error(
                    "fetched results for \(set.plan.entity.name) could not follow transaction \(transaction.number): \(error); rebuilding and invalidating"
                )
                invalidate(set, reason: "error", store: snapshot, service: service)
            }
        }
        return true
    }

    /// The filed sets (entity → key → value → set keys) that `transaction` can
    /// change, each with the changed rows it must look at: a row goes to the
    /// sets of its new value and of the value it had (``State/filedValues``),
    /// which then records its new one.
    private func narrowByEquality(
        _ transaction: CommittedTransaction, filing: [String: [String: [JSONValue: Set<String>]]],
        memory: inout InMemoryRows, store: Store
    ) -> (sets: [(ResultSet, Set<Int64>)], unread: [String]) {
        var perSet: [String: Set<Int64>] = [:]
        var unread: [String] = []
        var learned: [(entity: String, key: String, row: Int64, value: JSONValue?)] = []
        for (entityName, keys) in filing {
            guard let changes = transaction.changes[entityName] else { continue }
            let changed = changes.allRows
            guard let entity = store.schema.entity(named: entityName), let rows = try? memory.rows(of: entity) else {
                // Unreadable: every filed set of the entity looks at every changed row, and its
                // filing is made anew from the sets afterwards.
                unread.append(entityName)
                for setKeys in keys.values.flatMap(\.values) {
                    for key in setKeys { perSet[key, default: []].formUnion(changed) }
                }
                continue
            }
            let known = state.withLock { $0.filedValues[entityName] ?? [:] }
            for (key, byValue) in keys {
                let values = known[key] ?? [:]
                for id in changed {
                    let new = rows[id]?.object[key]
                    let old = values[id]
                    if let new, let sets = byValue[new] {
                        for set in sets { perSet[set, default: []].insert(id) }
                    }
                    if let old, old != new, let sets = byValue[old] {
                        for set in sets { perSet[set, default: []].insert(id) }
                    }
                    if old != new { learned.append((entityName, key, id, new)) }
                }
            }
        }
        return state.withLock { state in
            for (entity, key, row, value) in learned {
                let filed = value.map { state.byEquality[entity]?[key]?[$0] != nil } ?? false
                state.filedValues[entity, default: [:]][key, default: [:]][row] = filed ? value : nil
            }
            return (perSet.compactMap { key, rows in state.sets[key].map { ($0, rows) } }, unread)
        }
    }

    /// Applies `transaction` to one set and notifies its subscribers.
    private func follow(
        _ set: ResultSet, transaction: CommittedTransaction, changedRows: [String: Set<Int64>],
        touchedKeys: [String: [Int64: Set<String>]], only: Set<Int64>? = nil, memory: inout InMemoryRows,
        store: Store, service: DepotService
    ) throws(RPCError) {
        if let fault = service.configuration.failDeltasAtTransaction, fault == transaction.number {
            throw .internalError("injected failure at transaction \(fault) (DEPOTD_FAIL_DELTAS_AT)")
        }
        let entity = set.plan.entity
        var candidates: Set<Int64>
        if let only {
            candidates = only
        } else {
            candidates = try candidateRows(
                entity: entity, dependencies: set.dependencies, changedRows: changedRows, store: store)
        }
        let touched = touchedKeys[entity.name] ?? [:]
        if let keys = set.inMemory?.predicateKeys {
            // A row it does not hold, updated in keys its predicate does not read, still does not match.
            candidates = state.withLock { _ in
                candidates.filter { id in
                    guard let changed = touched[id], !changed.isEmpty, changed.isDisjoint(with: keys) else {
                        return true
                    }
                    return set.index.contains(id)
                }
            }
            guard !candidates.isEmpty else { return }
        }
        let evaluated: [Int64: SortKey]
        if let inMemory = set.inMemory {
            evaluated = try memory.evaluate(inMemory, entity: entity, rows: candidates)
        } else {
            evaluated = try store.keyedRows(set.plan, among: Array(candidates))
        }
        // Applied under the lock: a reader may be paging the set.
        let (delta, opened) = state.withLock { state -> (ResultSet.Delta?, Bool) in
            guard state.sets[set.key] === set else { return (nil, false) }
            let changes = Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) })
            guard set.coalesceMilliseconds != nil else {
                let delta = set.apply(changes, touched: touched)
                set.transaction = transaction.number
                return (delta, false)
            }
            // Coalescing: fold the change into the open window; the flush announces it.
            let oldSections = set.visibleSections
            var oldKeys: [Int64: SortKey] = [:]
            for id in candidates { if let entry = set.index.entry(for: id) { oldKeys[id] = entry.key } }
            let delta = set.apply(changes, touched: touched)
            set.transaction = transaction.number
            guard !delta.isEmpty else { return (nil, false) }
            let opening = set.coalescing == nil
            var window = set.coalescing ?? CoalescingWindow(opening: transaction.number, sections: oldSections)
            window.fold(
                delta, transaction: transaction.number, oldSections: oldSections, newSections: set.visibleSections,
                oldKeys: oldKeys, currentKey: { set.index.entry(for: $0)?.key })
            set.coalescing = window
            return (nil, opening)
        }
        if opened, let milliseconds = set.coalesceMilliseconds {
            // Flushed in the lane, behind the commits before the window closes (queued on the writer).
            service.writes.asyncAfter(.milliseconds(milliseconds)) { [self] in
                guard !service.isStopping else { return }
                service.writes.lane.enqueueReading { self.flush(set, snapshot: $0, service: service) }
            }
        }
        guard let delta, !delta.isEmpty else { return }
        // The changed rows were read whole for the evaluation: a set of whole objects takes its values from them.
        let read = set.inMemory != nil && set.shape.includesVersion ? try memory.rows(of: entity) : nil
        try deliver(
            delta, of: set, transaction: transaction.number, transactions: nil, rows: read, store: store,
            service: service)
    }

    /// Announces a coalescing set's open window as one `results/didChange`
    /// (publish lane: `snapshot` holds exactly the state the set reflects).
    func flush(_ set: ResultSet, snapshot: Result<Store, RPCError>, service: DepotService) {
        let folded = state.withLock { state -> (ResultSet.Delta, Int64, Int64)? in
            guard state.sets[set.key] === set, let window = set.coalescing else { return nil }
            set.coalescing = nil
            let delta = window.composed(
                sections: set.visibleSections, position: { set.visiblePosition(of: $0) },
                key: { set.index.entry(for: $0)?.key })
            return (delta, window.first, window.last)
        }
        guard let (delta, first, last) = folded, !delta.isEmpty else { return }
        do {
            try deliver(
                delta, of: set, transaction: last, transactions: first == last ? nil : [first, last],
                store: snapshot.get(), service: service)
        } catch {
            service.logger.error(
                "fetched results for \(set.plan.entity.name) could not announce transactions \(first)...\(last): \(error); rebuilding and invalidating"
            )
            invalidate(set, reason: "error", store: try? snapshot.get(), service: service)
        }
    }

    /// Flushes the open window of the set behind `subscription`, if any (publish lane).
    private func flush(subscription: String, snapshot: Result<Store, RPCError>, service: DepotService) {
        let set = state.withLock { state in
            state.subscriptions[subscription].flatMap { state.sets[$0.setKey] }
        }
        if let set, set.coalesceMilliseconds != nil { flush(set, snapshot: snapshot, service: service) }
    }

    /// Reads the delta's object values once, encodes it once, and sends each
    /// subscriber its notification with its own `subscription` and `seq`.
    private func deliver(
        _ delta: ResultSet.Delta, of set: ResultSet, transaction: Int64, transactions: [Int64]?,
        rows: [Int64: EvaluationRow]? = nil, store: Store, service: DepotService
    ) throws(RPCError) {
        let entity = set.plan.entity
        // One notification carrying this many objects would be larger than resyncing.
        let shared: [UInt8]?
        if delta.objects.count > Self.largestNotification {
            shared = nil
        } else {
            let valued = delta.objects.filter { $0.type != .delete }.map(\.id)
            var objects: [Int64: JSONValue] = [:]
            var unread: [Int64] = []
            for id in valued {
                if let row = rows?[id] { objects[id] = .object(row.object) } else { unread.append(id) }
            }
            if !unread.isEmpty {
                objects.merge(try store.objects(rows: unread, shape: set.shape)) { read, _ in read }
            }
            let changes = delta.objects.map { change in
                ObjectChange(
                    type: change.type, indexPath: change.old, newIndexPath: change.new,
                    id: "\(entity.name)/\(change.id)", object: change.type == .delete ? nil : objects[change.id])
            }
            shared = Self.sharedDelta(transactions: transactions, sections: delta.sections, objects: changes)
        }
        state.withLock { state in
            // Handed to the outbox at once, still under the lock (readers place their answers between two
            // notifications, never among them).
            var messages: [(bytes: [UInt8], peer: [UInt8])] = []
            var notified: [String] = []
            defer {
                service.outbox.send(contentsOf: messages)
                service.stats.didChangeSent(to: notified)
            }
            for id in set.subscribers.sorted() {
                guard var subscription = state.subscriptions[id] else { continue }
                subscription.seq += 1
                if let shared {
                    if !overflows(&subscription, service: service) {
                        messages.append(
                            (
                                Self.didChange(shared, subscription: subscription, transaction: transaction),
                                subscription.routingID
                            ))
                        notified.append(subscription.id)
                    }
                } else {
                    service.notify(
                        ResultsDidInvalidate.self, .init(subscription: id, reason: "largeTransaction"),
                        to: subscription.routingID)
                }
                state.subscriptions[id] = subscription
            }
        }
    }

    /// The part of a `results/didChange` every subscriber of a set shares, as a
    /// JSON object: written directly, since it is on every commit's path (the
    /// generic encoder costs several times as much).
    static func sharedDelta(transactions: [Int64]?, sections: [SectionChange], objects: [ObjectChange]) -> [UInt8] {
        var writer = JSONWriter()
        func write(_ numbers: [Int]) {
            writer.writeRaw("[")
            for (index, number) in numbers.enumerated() {
                if index > 0 { writer.writeRaw(",") }
                writer.write(Int64(number))
            }
            writer.writeRaw("]")
        }
        writer.writeRaw("{")
        if let transactions {
            writer.writeRaw("\"transactions\":")
            write(transactions.map { Int($0) })
            writer.writeRaw(",")
        }
        writer.writeRaw("\"sections\":[")
        for (index, section) in sections.enumerated() {
            writer.writeRaw(index > 0 ? ",{\"type\":" : "{\"type\":")
            writer.write(section.type.rawValue)
            writer.writeRaw(",\"index\":")
            writer.write(Int64(section.index))
            writer.writeRaw(",\"name\":")
            writer.write(section.name)
            writer.writeRaw("}")
        }
        writer.writeRaw("],\"objects\":[")
        for (index, change) in objects.enumerated() {
            writer.writeRaw(index > 0 ? ",{\"type\":" : "{\"type\":")
            writer.write(change.type.rawValue)
            if let path = change.indexPath {
                writer.writeRaw(",\"indexPath\":")
                write(path)
            }
            if let path = change.newIndexPath {
                writer.writeRaw(",\"newIndexPath\":")
                write(path)
            }
            writer.writeRaw(",\"id\":")
            writer.write(change.id)
            if let object = change.object {
                writer.writeRaw(",\"object\":")
                writer.write(object)
            }
            writer.writeRaw("}")
        }
        writer.writeRaw("]}")
        return writer.bytes
    }

    /// A whole `results/didChange` message: the subscriber's own members spliced before the shared ones.
    private static func didChange(_ shared: [UInt8], subscription: Subscription, transaction: Int64) -> [UInt8] {
        var writer = JSONWriter()
        writer.writeRaw("{\"subscription\":")
        writer.write(subscription.id)
        writer.writeRaw(",\"seq\":")
        writer.write(subscription.seq)
        writer.writeRaw(",\"transaction\":")
        writer.write(transaction)
        writer.writeRaw(",")
        writer.writeRaw(shared.dropFirst())
        return MessageEncoder.notification(method: ResultsDidChange.name, paramsJSON: writer.bytes)
    }

    /// After a failure to follow a transaction: rebuilds `set` from the store
    /// and tells its subscribers to resync (`results/didInvalidate`); when even
    /// the rebuild fails, the set and its subscriptions are dropped, so that a
    /// resync finds no stale results and subscribes again.
    private func invalidate(_ set: ResultSet, reason: String, store: Store?, service: DepotService) {
        var rows: [KeyedRow] = []
        let rebuilt = try? store?.keyedRows(set.plan, expectedCount: { rows.reserveCapacity($0) }) {
            rows.append($0)
        }
        let dropped = state.withLock { state -> [Subscription] in
            guard state.sets[set.key] === set else { return [] }
            set.coalescing = nil
            if let rebuilt {
                set.reset(rows: rows, transaction: rebuilt)
            } else {
                _ = state.uninstall(set.key)
            }
            var dropped: [Subscription] = []
            for id in set.subscribers.sorted() {
                guard let subscription = state.subscriptions[id] else { continue }
                if rebuilt == nil {
                    state.subscriptions[id] = nil
                    dropped.append(subscription)
                }
                service.notify(
                    ResultsDidInvalidate.self, .init(subscription: id, reason: reason), to: subscription.routingID)
            }
            return dropped
        }
        // A dropped subscription no longer counts against its session's quota: the resync subscribes again.
        for subscription in dropped { service.sessions.releaseSubscription(routingID: subscription.routingID) }
    }
}

extension ResultsEngine {
    /// Drops every result set and tells each subscriber to resync (`results/didInvalidate`):
    /// the store can no longer follow its commits (a cluster replica that diverged).
    func invalidateAll(reason: String, service: DepotService) {
        let sets = state.withLock { Array($0.sets.values) }
        for set in sets { invalidate(set, reason: reason, store: nil, service: service) }
    }

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

/// The changed rows of one transaction, read once per entity for every set
/// that evaluates in memory (``InMemoryFollow``).
struct InMemoryRows {
    let store: Store
    let changedRows: [String: Set<Int64>]
    private var rows: [String: [Int64: EvaluationRow]] = [:]
    private var evaluator: PredicateEvaluator?

    init(store: Store, changedRows: [String: Set<Int64>]) {
        self.store = store
        self.changedRows = changedRows
    }

    /// The changed rows of `entity` that still exist, read once.
    mutating func rows(of entity: EntitySchema) throws(RPCError) -> [Int64: EvaluationRow] {
        if let read = rows[entity.name] { return read }
        let read = try store.evaluationRows(of: entity, ids: Array(changedRows[entity.name] ?? []).sorted())
        rows[entity.name] = read
        return read
    }

    /// The sort keys of the `rows` of `entity` that match, evaluated without a query per set.
    mutating func evaluate(_ follow: InMemoryFollow, entity: EntitySchema, rows candidates: Set<Int64>) throws(RPCError)
        -> [Int64: SortKey]
    {
        let read = try rows(of: entity)
        // Relationships are never followed here: such requests are not evaluated in memory.
        let evaluator =
            self.evaluator
            ?? PredicateEvaluator(model: store.schema.descriptions, object: { _ in nil }, toMany: { _, _ in [] })
        self.evaluator = evaluator
        var result: [Int64: SortKey] = [:]
        for id in candidates {
            guard let row = read[id] else { continue }
            if let key = try follow.evaluate(row, id: id, entity: entity.name, evaluator: evaluator) {
                result[id] = key
            }
        }
        return result
    }
}

/// A counter of finished publishes that readers can wait on.
final class PublishSignal: @unchecked Sendable {
    // @unchecked: `epoch` is read and written only under `condition`'s lock.
    private let condition = NSCondition()
    private var count = 0

    /// How many publishes have finished.
    var epoch: Int {
        condition.lock()
        defer { condition.unlock() }
        return count
    }

    /// One more publish finished.
    func advance() {
        condition.lock()
        count += 1
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until a publish after `epoch` finishes, or `timeout` seconds pass.
    func wait(after epoch: Int, timeout: Double) {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(timeout)
        while count == epoch, condition.wait(until: deadline) {}
    }
}
