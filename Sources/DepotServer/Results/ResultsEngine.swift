import DepotProtocol
import DepotStore
import Foundation
import Synchronization

/// The fetched-results engine: subscriptions, their shared result sets, and
/// the deltas each committed transaction makes to them (DESIGN.md §7).
///
/// One owner: the publish lane (``PublishLane``). Every read and change of the
/// subscriptions and sets runs as a lane job, so jobs see them one at a time,
/// in commit order, and nothing here takes a lock, let alone sends under one.
/// The requests whose answers take their place among a session's
/// notifications (`results/subscribe`, `results/objects`, `results/snapshot`,
/// `results/unsubscribe`: ``Execution/ordered``) are answered from a lane job
/// through their ``Reply``, after every notification of the transactions
/// published before them and before any of the ones after.
///
/// After a commit the lane calls ``publish(_:store:context:)``: for each set
/// the transaction can change (``SetIndex``), ``DeltaComputer`` evaluates the
/// changed rows from the values the commit carries (its row images), reading a
/// snapshot of the store right after it only where those are not enough
/// (``ResultSet/readsStore``; the writer takes one only then,
/// ``needsSnapshot(for:modelVersion:)``), ``ResultSet`` applies them and yields the delta,
/// and ``DeltaEncoder`` encodes it once for every subscriber
/// (``SubscriptionTable`` numbers each one's `seq`).
///
/// Guarded:
/// - `table`, `index`, `publishedThrough`, `failure`: touched only in lane jobs
///   (checked by `owned()`, in release builds too); the lane orders each job's end
///   before the next one's start.
/// - `liveSets`, `liveSubscriptions`, `registering`: atomics read from any
///   thread (the writer asks whether publishing a commit must read the store).
final class ResultsEngine: @unchecked Sendable {
    private let lane: PublishLane
    /// The store the sets read, each through its definition's plan (which carries the key's scope).
    private let store: Store
    private var table = SubscriptionTable()
    private var index = SetIndex()
    /// Every set reflects every transaction up to this one.
    private var publishedThrough: Int64
    /// A transaction whose deltas fail to compute: the in-memory core's tests of the failure path set it.
    private var failure: Int64?
    private let liveSets = Atomic<Int>(0)
    private let liveSubscriptions = Atomic<Int>(0)
    /// Subscribes between their first read and their registration in the lane.
    private let registering = Atomic<Int>(0)
    /// The model version the installed sets were last checked against (lane jobs only).
    private var modelVersion: Int64?
    /// The model of ``modelVersion``: what a commit published without a snapshot committed under.
    private var modelSchema: Schema?
    /// ``modelVersion`` for the writer (-1 before the first): a commit under another model is
    /// published with a snapshot, which the sets follow the model change with (``needsSnapshot(for:modelVersion:)``).
    private let followedModel = Atomic<Int64>(-1)
    /// What the writer reads to tell whether publishing a commit needs a snapshot
    /// (``needsSnapshot(for:modelVersion:)``): the entities whose live sets read the store, those whose sets
    /// follow from the commit's row images alone, and whether a failure is injected.
    private let storeNeeds = Mutex<(reading: Set<String>, imaged: Set<String>, unbounded: Bool, failing: Bool)>(
        ([], [], false, false))
    /// Where commits' row images are asked for (``Store/captureRowImages(of:)``).
    private let imaging: @Sendable (Set<String>) -> Void

    /// An engine whose state `lane` owns; every set reflects `publishedThrough` to begin with.
    /// `imaging` asks the store for the row images of the entities the sets follow from them.
    init(
        lane: PublishLane, store: Store, publishedThrough: Int64,
        imaging: @escaping @Sendable (Set<String>) -> Void = { _ in }
    ) {
        self.lane = lane
        self.store = store
        self.publishedThrough = publishedThrough
        self.imaging = imaging
    }

    /// Checks that the caller is a lane job (in release builds too: one atomic load).
    private func owned() {
        precondition(lane.isRunningJob, "fetched-results state touched outside the publish lane")
    }

    /// Publishes the sizes that other threads read.
    private func mirror() {
        liveSets.store(index.sets.count, ordering: .relaxed)
        liveSubscriptions.store(table.count, ordering: .relaxed)
        let reading = Set(index.readingEntities.keys)
        let imaged = Set(index.imagedEntities.keys)
        let unbounded = index.unboundedReaders > 0
        let changed = storeNeeds.withLock { needs in
            defer { (needs.reading, needs.imaged, needs.unbounded) = (reading, imaged, unbounded) }
            return needs.imaged != imaged
        }
        if changed { imaging(imaged) }
    }

    /// Whether publishing `transactions` needs a snapshot of the store: a live set of an entity
    /// they change reads the store, or follows from row images they do not carry; or a subscribe
    /// is on its way to registering (its set's needs are not known to the writer yet); or the store's
    /// model (`modelVersion`, as of the commits) is not the one the sets follow: a migration (a
    /// transaction of its own, changing no rows) or a commit after one is published with a snapshot,
    /// which the sets move to the new model with before they follow the commit's rows.
    func needsSnapshot(for transactions: [CommittedTransaction], modelVersion: Int64) -> Bool {
        if registering.load(ordering: .sequentiallyConsistent) > 0 { return true }
        if followedModel.load(ordering: .sequentiallyConsistent) != modelVersion { return true }
        let (reading, imaged, _, failing) = storeNeeds.withLock { $0 }
        if failing { return true }
        for transaction in transactions {
            for entity in transaction.changes.keys {
                if reading.contains(entity) { return true }
                if imaged.contains(entity), transaction.images[entity] == nil { return true }
            }
        }
        return false
    }

    // MARK: Subscribing

    /// `results/subscribe`: builds (or shares) the result set, then registers the subscription in the lane.
    ///
    /// Reads the results on the calling reader at transaction T; the lane
    /// job, after every commit so far, catches up with what committed after T
    /// (from history) before registering, so no transaction falls between the
    /// snapshot and the deltas, and answers before any later delta.
    /// `definition` is the request as the key's view of the store defined it (``StoreView/resultsDefinition(_:)``).
    func subscribe(
        _ params: ResultsSubscribe.Parameters, definition: ResultsDefinition, context: RequestContext, reply: Reply
    ) throws(RPCError) {
        if let name = params.cacheName, name.isEmpty || name.count > 200 {
            throw .invalidParams(
                "cacheName must be 1 to 200 characters, got '\(name.prefix(40))'", field: "params.cacheName")
        }
        if let resume = params.resume, !ResultsDigest.isWellFormed(resume.digest) {
            throw .invalidParams(
                "resume.digest must be 64 lowercase hex digits (SHA-256), got '\(resume.digest.prefix(70))'",
                field: "params.resume.digest")
        }
        let routingID = context.routingID
        let service = context.core
        let limit = service.maxSubscriptionsPerSession
        let key = definition.key
        let (existing, held) = lane.perform { [self] in (index[key] != nil, table.count(of: routingID)) }
        // Refused before the read: a full session must not make the daemon build a set for nothing.
        guard held < limit else { throw Self.quotaExceeded(limit) }
        var building: ResultSet?
        var readFromCache = false
        if !existing {
            let set = Self.emptySet(definition)
            if let name = params.cacheName, let cached = try store.loadResultsCache(name),
                cached.requestKey.bytesEqual(key.string)
            {
                set.restore(rows: cached.rows, transaction: cached.transaction)
                readFromCache = true
            } else {
                let progress = context.progress(token: params.workDoneToken)
                progress?.begin(title: "Subscribing to \(params.request.entity)", total: nil)
                try set.read(from: store, cancellation: context.cancellation)
                progress?.end(completed: Int64(set.index.count), cancelled: false)
                // The read's transient buffers were large: hand freed pages back to the system.
                if set.index.count > 100_000 { trimFreedMemory() }
            }
            building = set
        }
        let (built, fromCache) = (building, readFromCache)
        let builtTransaction = built?.transaction
        let include = params.include ?? .firstBatch
        let firstBatch = max(1, params.request.batchSize ?? 50)
        // Counted before the registration takes its place in the lane: a commit queued after it
        // is published with a snapshot even when no set is installed yet (``mayHaveSets``).
        registering.add(1, ordering: .sequentiallyConsistent)
        service.afterCommits { [self] snapshot in
            defer { registering.subtract(1, ordering: .sequentiallyConsistent) }
            reply(
                Result { () throws(RPCError) -> [UInt8] in
                    owned()
                    let store = try snapshot.get()
                    guard table.count(of: routingID) < limit else { throw Self.quotaExceeded(limit) }
                    // A migration committed since the read: the set is read again in the new model.
                    let current = built.flatMap { $0.definition?.schema.version == store.schema.version ? $0 : nil }
                    if let set = current { try DeltaComputer.catchUp(set, store: store) }
                    // A joining subscriber starts from the set as it is: announce an open window to the others first.
                    if let shared = index[key], shared.coalescing != nil {
                        flush(shared, snapshot: snapshot, context: service)
                    }
                    let set: ResultSet
                    if let found = index[key] ?? current {
                        set = found
                    } else {
                        // The shared set went with its last subscriber since this subscribe looked (or a
                        // migration came between): read it here, against the model as it is now.
                        set = Self.emptySet(
                            definition.schema.version == store.schema.version
                                ? definition
                                : try ResultsDefinition(params, scope: definition.scope, schema: store.schema))
                        try set.read(from: store)
                    }
                    if let graph = set.related, !graph.isBuilt {
                        try graph.build(rows: set.visibleEntries().map(\.id), store: store)
                    }
                    if let name = params.cacheName { set.cacheName = name }
                    let subscription = table.add(routingID: routingID, setKey: key)
                    set.subscribers.insert(subscription.id)
                    // The first set follows the model it was read in: no set holds an older one.
                    if index.sets.isEmpty, modelVersion != store.schema.version { adopt(store.schema) }
                    if index[key] !== set { index.install(set, key: key) }
                    mirror()
                    if let name = params.cacheName, !fromCache || set.transaction != builtTransaction {
                        service.persistCache(name, set.cacheEntry)
                    }
                    // A prefetching set answers in full: a resumed answer carries no related objects.
                    if let resume = params.resume, set.related == nil,
                        let named = try ResultsResumption.named(set, since: resume.transaction, store: store)
                    {
                        return try JSONCoding.encodeBytes(
                            ResultsSubscribe.Result(
                                subscription: subscription.id, seq: 0, transaction: set.transaction,
                                count: set.visibleCount, sections: set.sectionInfos, objects: [],
                                fromCache: params.cacheName == nil ? nil : fromCache, resumed: true,
                                digest: ResultsResumption.digest(of: set),
                                changed: try ResultsResumption.rows(
                                    named, of: set, include: include, firstBatch: firstBatch, store: store)))
                    }
                    let count =
                        switch include {
                        case .all: set.visibleCount
                        case .noObjects: 0
                        case .firstBatch: min(set.visibleCount, firstBatch)
                        }
                    let ids = set.visibleEntries(in: 0..<count).map(\.id)
                    let objects = try set.objects(ids, store: store)
                    let answer = try JSONCoding.encodeBytes(
                        ResultsSubscribe.Result(
                            subscription: subscription.id, seq: 0, transaction: set.transaction,
                            count: set.visibleCount, sections: set.sectionInfos,
                            objects: ids.map { objects[$0] ?? .null },
                            fromCache: params.cacheName == nil ? nil : fromCache,
                            resumed: params.resume == nil ? nil : false,
                            digest: params.resume == nil ? nil : ResultsResumption.digest(of: set)))
                    guard let graph = set.related else { return answer }
                    return try RelatedGraph.appendRelated(
                        to: answer, rows: ids, plan: graph.plan, scopes: graph.scopes, store: store)
                })
        }
    }

    /// A set for `definition`, with no rows yet.
    private static func emptySet(_ definition: ResultsDefinition) -> ResultSet {
        let set = ResultSet(
            key: definition.key, plan: definition.plan, shape: definition.plan.shape, sectioned: definition.sectioned,
            dependencies: definition.dependencies, rows: [], transaction: 0,
            coalesceMilliseconds: definition.coalesceMilliseconds, inMemory: definition.inMemory,
            grouped: definition.grouped.map(GroupedResults.init))
        set.definition = definition
        set.related = RelatedGraph(
            plan: definition.plan, scopes: definition.scope.isUnrestricted ? nil : definition.scope.rules)
        return set
    }

    private static func quotaExceeded(_ limit: Int) -> RPCError {
        .overloaded(
            "this session already holds \(limit) subscriptions (--max-subscriptions-per-session); unsubscribe some first",
            limit: "maxSubscriptionsPerSession", value: limit)
    }

    // MARK: Reading

    /// `results/objects`: a consistent read at the `seq` it reports, answered
    /// in the session's stream where that `seq` says (DESIGN.md §7).
    ///
    /// A page (up to ``pageReadInLane`` objects) is picked, read and answered
    /// in one lane job, when the store holds exactly the transaction X the sets
    /// reflect. A longer read is optimistic, off the lane: the lane picks the
    /// ids and `seq` at X, the calling reader reads their values in a snapshot
    /// at X, and the lane answers if no later delta of the subscription went
    /// out meanwhile. Otherwise (a commit ahead, a coalescing window open) one
    /// lane job reads and answers, on a snapshot of exactly the state the sets reflect.
    func objects(_ params: ResultsObjects.Parameters, context: RequestContext, reply: Reply) throws(RPCError) {
        guard params.offset >= 0 else {
            throw .invalidParams("offset must not be negative, got \(params.offset)", field: "params.offset")
        }
        guard (0...100_000).contains(params.length) else {
            throw .invalidParams("length must be between 0 and 100000, got \(params.length)", field: "params.length")
        }
        let (id, routingID, service, store) = (params.subscription, context.routingID, context.core, store)
        let positions = params.offset..<params.offset + params.length
        guard params.length > Self.pageReadInLane else {
            // A page: picked, read and answered in one lane job, if no commit is ahead of the lane.
            return lane.enqueue { [self] in
                guard let subscription = table.lookup(id, of: routingID), let set = index[subscription.setKey] else {
                    return reply(.failure(Self.missing(id)))
                }
                let ids = set.visibleEntries(in: positions).map(\.id)
                if set.grouped != nil, set.coalescing == nil {
                    // The groups are in memory, as of the seq the session last received.
                    return reply(
                        Result { () throws(RPCError) -> [UInt8] in
                            try Self.encodeObjects(ids, of: set, seq: subscription.seq, store: store)
                        })
                }
                let (seq, shape, transaction) = (subscription.seq, set.shape, publishedThrough)
                let prefetch = set.related.map { ($0.plan, $0.scopes) }
                // Read now only if the store holds exactly what the sets reflect (no commit ahead, no open window).
                let read = Result { () throws(RPCError) -> [UInt8]? in
                    guard set.coalescing == nil else { return nil }
                    return try Self.answer(
                        ids, shape: shape, prefetch: prefetch, seq: seq, at: transaction, in: store)
                }
                guard case .success(let bytes?) = read else {
                    return objectsInLane(id, positions: positions, routingID: routingID, context: service, reply: reply)
                }
                reply(.success(bytes))
            }
        }
        // A long read runs on the calling reader, not in the lane: the lane picks the ids and checks
        // afterwards that no later delta of the subscription went out meanwhile.
        let pick = lane.perform { [self] () -> ObjectsPick in
            guard let subscription = table.lookup(id, of: routingID), let set = index[subscription.setKey] else {
                return .missing
            }
            guard set.coalescing == nil, set.grouped == nil, set.related == nil else { return .inLane }
            return .picked(
                seq: subscription.seq, ids: set.visibleEntries(in: positions).map(\.id), shape: set.shape,
                transaction: publishedThrough)
        }
        guard case .picked(let seq, let ids, let shape, let transaction) = pick else {
            if case .missing = pick { throw Self.missing(id) }
            return objectsInLane(id, positions: positions, routingID: routingID, context: service, reply: reply)
        }
        let bytes = try Self.answer(
            ids, shape: shape, prefetch: nil, seq: seq, at: transaction, in: store)
        guard let bytes else {
            return objectsInLane(id, positions: positions, routingID: routingID, context: service, reply: reply)
        }
        lane.enqueue { [self] in
            // In place only if no later delta of the subscription went out meanwhile.
            guard table.lookup(id, of: routingID)?.seq == seq else {
                return objectsInLane(id, positions: positions, routingID: routingID, context: service, reply: reply)
            }
            reply(.success(bytes))
        }
    }

    /// The longest `results/objects` read in a lane job; longer ones read on a reader, off the lane.
    static let pageReadInLane = 500

    /// The `results/objects` answer for `ids` at `seq`, read in a snapshot of `store`; `nil` when
    /// that snapshot is not at `transaction` (a commit the sets do not reflect yet).
    private static func answer(
        _ ids: [Int64], shape: ObjectShape, prefetch: (PrefetchPlan, [String: PredicateNode]?)?, seq: Int64,
        at transaction: Int64, in store: Store
    ) throws(RPCError) -> [UInt8]? {
        try store.readSnapshot { reader -> [UInt8]? in
            guard reader.transaction == transaction else { return nil }
            let objects = try reader.objects(rows: ids, shape: shape)
            let answer = try JSONCoding.encodeBytes(
                ResultsObjects.Result(seq: seq, objects: ids.map { objects[$0] ?? .null }))
            guard let (plan, scopes) = prefetch else { return answer }
            // The related objects of the rows answered, from the same snapshot.
            return RelatedGraph.appendRelated(to: answer, graph: try reader.prefetch(plan, rows: ids, scopes: scopes))
        }
    }

    /// What `results/objects` learned in the lane.
    private enum ObjectsPick: Sendable {
        case missing
        case inLane
        case picked(seq: Int64, ids: [Int64], shape: ObjectShape, transaction: Int64)
    }

    /// `results/objects` read and answered in one lane job.
    private func objectsInLane(
        _ id: String, positions: Range<Int>, routingID: [UInt8], context: some ResultsContext, reply: Reply
    ) {
        context.afterCommits { [self] snapshot in
            flush(subscription: id, snapshot: snapshot, context: context)
            reply(
                Result { () throws(RPCError) -> [UInt8] in
                    owned()
                    guard let subscription = table.lookup(id, of: routingID), let set = index[subscription.setKey]
                    else { throw Self.missing(id) }
                    let ids = set.visibleEntries(in: positions).map(\.id)
                    return try Self.encodeObjects(ids, of: set, seq: subscription.seq, store: snapshot.get())
                })
        }
    }

    /// A `results/objects` answer: the objects (or groups) of `ids` at `seq`.
    private static func encodeObjects(_ ids: [Int64], of set: ResultSet, seq: Int64, store: Store) throws(RPCError)
        -> [UInt8]
    {
        let objects = try set.objects(ids, store: store)
        let answer = try JSONCoding.encodeBytes(
            ResultsObjects.Result(seq: seq, objects: ids.map { objects[$0] ?? .null }))
        guard let graph = set.related else { return answer }
        return try RelatedGraph.appendRelated(
            to: answer, rows: ids, plan: graph.plan, scopes: graph.scopes, store: store)
    }

    /// `results/snapshot`: the ids and sections at the subscription's `seq`, answered in the lane.
    func snapshot(_ params: ResultsSnapshot.Parameters, context: RequestContext, reply: Reply) {
        let (id, routingID, service) = (params.subscription, context.routingID, context.core)
        let answer: @Sendable () -> Void = { [self] in
            reply(
                Result { () throws(RPCError) -> [UInt8] in
                    owned()
                    guard let subscription = table.lookup(id, of: routingID), let set = index[subscription.setKey]
                    else { throw Self.missing(id) }
                    return try JSONCoding.encodeBytes(
                        ResultsSnapshot.Result(
                            seq: subscription.seq, transaction: max(set.transaction, publishedThrough),
                            sections: set.sectionInfos, ids: set.visibleEntries().map { set.wireID(of: $0.id) }))
                })
        }
        lane.enqueue { [self] in
            guard let subscription = table.lookup(id, of: routingID), index[subscription.setKey]?.coalescing != nil
            else { return answer() }
            // A coalescing window still open is announced first, with a snapshot of the state it folded.
            service.afterCommits { [self] snapshot in
                flush(subscription: id, snapshot: snapshot, context: service)
                answer()
            }
        }
    }

    private static func missing(_ id: String) -> RPCError {
        .notFound("no subscription '\(id)' in this session", id: id)
    }

    /// `results/unsubscribe`: no delta of the subscription follows its answer.
    func unsubscribe(_ id: String, routingID: [UInt8], context: some ResultsContext, reply: Reply) {
        lane.enqueue { [self] in
            guard table.lookup(id, of: routingID) != nil else { return reply(.failure(Self.missing(id))) }
            persist(remove(id).map { [$0] } ?? [], context: context)
            reply(Result { () throws(RPCError) in try JSONCoding.encodeBytes(Null()) })
        }
    }

    /// Frees every subscription of a closed session.
    func removeSubscriptions(of routingID: [UInt8], context: some ResultsContext) {
        lane.enqueue { [self] in
            persist(table.ids(of: routingID).compactMap { remove($0) }, context: context)
        }
    }

    /// Ends the subscriptions of `routingIDs` whose entity `changed` says had its
    /// scope changed (SIGHUP re-scoped their keys, DESIGN.md §2): each gets
    /// `results/didInvalidate {reason: "scope"}` and subscribes again to see
    /// the new scope. Returns how many were ended.
    func rescope(
        _ routingIDs: [[UInt8]], changed: @escaping @Sendable ([UInt8], String) -> Bool, context: some ResultsContext
    ) -> Int {
        lane.perform { [self] in
            var ended: [ResultSet] = []
            var count = 0
            for routingID in routingIDs {
                for id in table.ids(of: routingID) {
                    guard let subscription = table[id], let set = index[subscription.setKey],
                        changed(routingID, set.plan.entity.name)
                    else { continue }
                    if let freed = remove(id) { ended.append(freed) }
                    context.notify(ResultsDidInvalidate.self, .init(subscription: id, reason: "scope"), to: routingID)
                    count += 1
                }
            }
            persist(ended, context: context)
            return count
        }
    }

    /// Removes a subscription; returns its set when that was the last subscriber.
    private func remove(_ id: String) -> ResultSet? {
        owned()
        defer { mirror() }
        guard let subscription = table.remove(id), let set = index[subscription.setKey] else { return nil }
        set.subscribers.remove(id)
        guard set.subscribers.isEmpty else { return nil }
        return index.uninstall(subscription.setKey)
    }

    /// Writes the named caches of freed sets (on the writer, ordered with commits).
    private func persist(_ sets: [ResultSet], context: some ResultsContext) {
        for set in sets {
            if let name = set.cacheName { context.persistCache(name, set.cacheEntry) }
        }
    }

    /// Writes every live named cache (at shutdown, after the writer and the lane drained).
    func persistAll(store: Store) {
        let named = lane.perform { [self] in
            index.sets.values.compactMap { set in set.cacheName.map { ($0, set.cacheEntry) } }
        }
        for (name, entry) in named { try? store.saveResultsCache(name, entry) }
    }

    /// `results/deleteCache`: removes a named cache, or every cache; live
    /// subscriptions keep running but no longer persist under that name (writer).
    func deleteCache(_ name: String?, store: Store) throws(RPCError) {
        lane.enqueue { [self] in
            for set in index.sets.values where name == nil || set.cacheName.map({ name!.bytesEqual($0) }) == true {
                set.cacheName = nil
            }
        }
        try store.deleteResultsCache(name)
    }

    /// Whether every live set follows commits from their row images alone (none reads the store),
    /// no subscribe is on its way to registering and no failure is injected: publishing a save
    /// then takes no snapshot, unless the save is too large to carry images or the model changed.
    var followsFromImagesAlone: Bool {
        registering.load(ordering: .sequentiallyConsistent) == 0
            && storeNeeds.withLock { $0.reading.isEmpty && !$0.failing }
    }

    /// Whether following a commit reads, of all the live sets, at most their own windows' rows
    /// (``ResultSet/readsOnlyItsWindow``): no read that may cover a table, no subscribe on its way
    /// to registering and no failure injected.
    var readsAtMostWindows: Bool {
        registering.load(ordering: .sequentiallyConsistent) == 0
            && storeNeeds.withLock { !$0.unbounded && !$0.failing }
    }

    /// Whether a result set is live or a subscribe is on its way to registering one.
    var mayHaveSets: Bool {
        registering.load(ordering: .sequentiallyConsistent) > 0 || liveSets.load(ordering: .relaxed) > 0
    }

    /// How many subscriptions and shared sets are live (for `server/stats`).
    var counts: (subscriptions: Int, sets: Int) {
        (liveSubscriptions.load(ordering: .relaxed), liveSets.load(ordering: .relaxed))
    }

    /// How many subscriptions the session `routingID` holds.
    func subscriptionCount(of routingID: [UInt8]) -> Int {
        lane.perform { [self] in table.count(of: routingID) }
    }

    /// Drops the statistics of subscriptions that are gone.
    func forgetEndedSubscriptions(in stats: ServerStatistics) {
        lane.enqueue { [self] in stats.forgetSubscriptions(except: table.ids) }
    }

    /// Every shared set as `server/stats` reports it: its sharing key, row and
    /// section counts, transaction, cache name and its subscriptions' (id, session) pairs.
    func statistics() -> [SharedSetFigures] {
        lane.perform { [self] in
            index.sets.values.map { set in
                SharedSetFigures(
                    key: set.key.string, rows: set.index.count, sections: set.sectioned ? set.sections.count : 1,
                    transaction: set.transaction, cacheName: set.cacheName,
                    subscribers: set.subscribers.sorted().compactMap { id in table[id].map { (id, $0.routingID) } })
            }
        }
    }

    /// Makes computing the deltas of `transaction` fail, to test the failure path in memory.
    func failToFollow(_ transaction: Int64) {
        lane.perform { [self] in failure = transaction }
        // Its sets are rebuilt from a snapshot: the writer takes one for every commit from now on.
        storeNeeds.withLock { $0.failing = true }
    }

    // MARK: Slow consumers

    /// Whether `subscription`'s deltas must be dropped: its session's queue is
    /// past the limit, or it already overflowed and owes a resync.
    private func overflows(_ subscription: inout SubscriptionTable.Subscription, context: some ResultsContext) -> Bool {
        if subscription.overflowed { return true }
        guard context.isOverflowing(subscription.routingID) else { return false }
        subscription.overflowed = true
        context.logger.notice(
            "subscription \(subscription.id) overflowed its session's queue; deltas stop until it drains")
        return true
    }

    /// After a session's queue drained: tells each of its overflowed
    /// subscriptions to resync (`results/didInvalidate`, reason `overflow`).
    func sendInvalidations(to routingID: [UInt8], context: some ResultsContext) {
        lane.enqueue { [self] in
            for id in table.ids(of: routingID) where table[id]?.overflowed == true {
                table[id]?.overflowed = false
                context.notify(ResultsDidInvalidate.self, .init(subscription: id, reason: "overflow"), to: routingID)
            }
        }
    }

    // MARK: Publishing

    /// Sends each affected subscription its `results/didChange` for `transaction`
    /// (a lane job, in commit order); returns whether any set could be affected.
    ///
    /// `store` reads the state right after the commit (or says why no snapshot
    /// was taken: the affected sets are then invalidated, never left behind).
    @discardableResult
    func publish(
        _ transaction: CommittedTransaction, store: Result<Store, RPCError>?, context: some ResultsContext
    ) -> Bool {
        owned()
        defer { publishedThrough = max(publishedThrough, transaction.number) }
        // What publishing this commit read of the store, by reason (`server/stats`), once it reached a live set.
        var reads = ServerStats.StoreReads()
        defer { if reads.commits > 0 { context.storeReadsMade(reads) } }
        // A model change (a migration is a transaction of its own) is followed before the transaction's rows.
        var migrated = false
        if case .success(let current)? = store, current.schema.version != modelVersion {
            migrated = followModel(current, transaction: transaction.number, reads: &reads, context: context)
            if migrated { (reads.commits, reads.snapshot) = (1, 1) }
        }
        let (unfiled, filing) = index.affected(by: transaction)
        guard !unfiled.isEmpty || !filing.isEmpty else { return migrated }
        reads.commits = 1
        // No snapshot when the writer found that no set needs one (``needsSnapshot(for:modelVersion:)``).
        let snapshot: Store?
        do {
            snapshot = try store?.get()
            if snapshot != nil { reads.snapshot = 1 }
        } catch {
            // Nothing can be read: every set the transaction may touch resyncs from scratch.
            for set in unfiled + index.sets(in: filing) {
                context.logger.error(
                    "fetched results for \(set.plan.entity.name) could not follow transaction \(transaction.number): \(error); invalidating"
                )
                invalidate(set, reason: "error", store: nil, context: context)
            }
            return true
        }
        var computer = DeltaComputer(transaction, store: snapshot, schema: modelSchema ?? context.currentSchema)
        defer { reads.add(computer.reads) }
        let (filed, unread) = index.narrow(transaction, filing: filing) { computer.rows(of: $0) }
        // Every set's notifications for the transaction go out in one send: a peer with several is woken once.
        var outgoing = Outgoing()
        defer { outgoing.send(context) }
        for (set, only) in unfiled.map({ ($0, Set<Int64>?.none) }) + filed.map({ ($0.0, Optional($0.1)) }) {
            do {
                try follow(
                    set, transaction: transaction.number, only: only, computer: &computer, into: &outgoing,
                    reads: &reads, context: context)
            } catch {
                // Never a silent desync: the set is rebuilt and its subscribers told to resync.
                context.logger.error(
                    "fetched results for \(set.plan.entity.name) could not follow transaction \(transaction.number): \(error); rebuilding and invalidating"
                )
                invalidate(set, reason: "error", store: snapshot, context: context)
            }
        }
        if !unread.isEmpty { index.refile(unread) }
        return true
    }

    /// Applies transaction `number` to one set and notifies its subscribers,
    /// or folds it into the set's coalescing window.
    private func follow(
        _ set: ResultSet, transaction number: Int64, only: Set<Int64>?, computer: inout DeltaComputer,
        into outgoing: inout Outgoing, reads: inout ServerStats.StoreReads, context: some ResultsContext
    ) throws(RPCError) {
        if let failure, failure == number { throw .internalError("injected failure at transaction \(number)") }
        guard index.contains(set) else { return }
        var changes: [Int64: SortKey?]
        var touched: [Int64: Set<String>]
        var keptLinks: Set<Int64> = []
        if let grouped = set.grouped {
            // Vanished groups' ids are kept only until their deletes are announced.
            if set.coalescing == nil { grouped.forgetRetired() }
            let candidates = try computer.candidates(for: set)
            (changes, touched) = try grouped.apply(
                try computer.groupMembers(candidates, of: set, grouped: grouped), candidates: candidates)
        } else {
            changes = try computer.changes(for: set, only: only)
            // With no row of its own changed, a row reached through links needs only the graph's key.
            touched = changes.isEmpty ? [:] : computer.touched(set.plan.entity.name)
            if let graph = set.related {
                // Values alone changed along the paths (no scope to re-check): rows the transaction did not
                // change themselves keep their links, and are not read again.
                let linksHold = graph.scopes == nil && !computer.mayChangeLinks(among: graph.plan.destinations)
                let own = computer.changedRows[set.plan.entity.name] ?? []
                // A row linking to an object the transaction changed is an update: its graph changed.
                for row in graph.rowsReaching(computer.changedRows) {
                    guard let entry = set.index.entry(for: row) else { continue }
                    if changes.index(forKey: row) == nil { changes[row] = entry.key }
                    touched[row, default: []].insert(graph.rowKey)
                    if linksHold, !own.contains(row) { keptLinks.insert(row) }
                }
            }
        }
        try announce(
            changes, touched: touched, of: set, transaction: number, store: try? computer.store, keptLinks: keptLinks,
            changedRows: computer.changedRows, into: &outgoing, reads: &reads, context: context
        ) {
            () throws(RPCError) in
            // The changed rows' whole values came with the commit or were read for the evaluation: the objects
            // come from them where the set's shape can (``ObjectShape/project(_:)``: not with to-many keys).
            set.inMemory != nil ? try computer.changedRows(of: set.plan.entity) : nil
        }
    }

    /// Applies one transaction's re-evaluated rows (`changes`, `touched`: as ``ResultSet/apply(_:touched:)``
    /// takes them) to `set` and notifies its subscribers, or folds them into its coalescing window.
    ///
    /// - Parameters:
    ///   - keptLinks: rows whose prefetched links the transaction cannot have changed.
    ///   - changedRows: the transaction's changed rows by entity (`nil`: not known), whose
    ///     reached related objects the notification carries.
    ///   - rows: the changed rows' values where they were read already.
    private func announce(
        _ changes: [Int64: SortKey?], touched: [Int64: Set<String>], of set: ResultSet, transaction number: Int64,
        store: Store?, keptLinks: Set<Int64> = [], changedRows: [String: Set<Int64>]? = nil,
        into outgoing: inout Outgoing, reads: inout ServerStats.StoreReads,
        context: some ResultsContext,
        rows: () throws(RPCError) -> [Int64: EvaluationRow]?
    ) throws(RPCError) {
        // Nothing of the set changed (most sets a one-row save reaches): it has followed the transaction.
        guard !changes.isEmpty else {
            set.transaction = number
            return
        }
        guard set.coalesceMilliseconds != nil else {
            var refilled = false
            let delta = try set.apply(changes, touched: touched) { () throws(RPCError) -> [KeyedRow] in
                refilled = true
                return try set.firstRows(in: store)
            }
            if refilled { reads.count(.windowRefill) }
            set.transaction = number
            guard !delta.isEmpty else { return }
            if let graph = set.related {
                try graph.follow(delta, store: try Self.required(store), keeping: keptLinks, changed: changedRows)
            }
            return try deliver(
                delta, of: set, transaction: number, transactions: nil, rows: try rows(), store: store,
                into: &outgoing, reads: &reads, context: context)
        }
        // Coalescing: fold the change into the open window; the flush announces it.
        let oldSections = set.visibleSections
        var oldKeys: [Int64: SortKey] = [:]
        for id in changes.keys { if let entry = set.index.entry(for: id) { oldKeys[id] = entry.key } }
        var refilled = false
        let delta = try set.apply(changes, touched: touched) { () throws(RPCError) -> [KeyedRow] in
            refilled = true
            return try set.firstRows(in: store)
        }
        if refilled { reads.count(.windowRefill) }
        set.transaction = number
        guard !delta.isEmpty else { return }
        if let graph = set.related {
            try graph.follow(delta, store: try Self.required(store), keeping: keptLinks, changed: changedRows)
        }
        let opening = set.coalescing == nil
        var window = set.coalescing ?? CoalescingWindow(opening: number, sections: oldSections)
        window.fold(
            delta, transaction: number, oldSections: oldSections, newSections: set.visibleSections, oldKeys: oldKeys,
            currentKey: { set.index.entry(for: $0)?.key })
        set.coalescing = window
        if opening, let milliseconds = set.coalesceMilliseconds {
            // Flushed in the lane, behind the commits before the window closes.
            context.afterCommits(in: milliseconds) { [self] snapshot in
                flush(set, snapshot: snapshot, context: context)
            }
        }
    }

    // MARK: Across a migration

    /// Follows the model `store` holds, new since the sets were checked (DESIGN.md §7, Across a
    /// migration), as part of transaction `number`; returns whether any set was affected.
    private func followModel(
        _ store: Store, transaction number: Int64, reads: inout ServerStats.StoreReads, context: some ResultsContext
    ) -> Bool {
        let schema = store.schema
        adopt(schema)
        var outgoing = Outgoing()
        defer { outgoing.send(context) }
        let stale = index.sets.values.filter { $0.definition.map { $0.schema.version != schema.version } ?? false }
        for set in stale.sorted(by: { $0.key < $1.key }) {
            do {
                try migrate(set, to: store, transaction: number, into: &outgoing, reads: &reads, context: context)
            } catch {
                context.logger.error(
                    "fetched results for \(set.plan.entity.name) could not follow model version \(schema.version): \(error); invalidating"
                )
                invalidate(set, reason: "error", store: store, context: context)
            }
        }
        return !stale.isEmpty
    }

    /// Takes `schema` as the model the sets follow (lane jobs only).
    private func adopt(_ schema: Schema) {
        modelVersion = schema.version
        modelSchema = schema
        followedModel.store(schema.version, ordering: .sequentiallyConsistent)
    }

    /// Moves `set` to the model `store` holds: a request that names a key or entity the migration
    /// renamed, or that no longer fits the model, ends its subscriptions with
    /// `results/didInvalidate {reason: "model"}`; otherwise the set keeps its rows and order in the
    /// new plan, and the rows whose values the migration changed (a renamed key, an attribute added
    /// with a default, a relationship to a renamed entity, among the keys its objects carry) are
    /// `update`s of transaction `number`.
    private func migrate(
        _ set: ResultSet, to store: Store, transaction number: Int64, into outgoing: inout Outgoing,
        reads: inout ServerStats.StoreReads, context: some ResultsContext
    ) throws(RPCError) {
        guard let old = set.definition else { return }
        let migration = ModelMigration(from: old.schema, to: store.schema)
        let definition =
            old.names(renamedIn: migration)
            ? nil : try? ResultsDefinition(old.params, scope: old.scope, schema: store.schema)
        guard let definition else {
            for id in set.subscribers.sorted() {
                guard let routingID = table[id]?.routingID else { continue }
                _ = remove(id)
                context.notify(ResultsDidInvalidate.self, .init(subscription: id, reason: "model"), to: routingID)
            }
            index.uninstall(set.key)
            mirror()
            return
        }
        index.uninstall(set.key)
        set.redefine(definition)
        index.install(set, key: set.key)
        // The new plan may read the store where the old one did not (or the other way round).
        mirror()
        let changed = migration.changedKeys(of: set.plan.entity)
        guard set.grouped == nil, !changed.isDisjoint(with: set.shape.keys + set.shape.toManyKeys) else { return }
        // A window's rows out of sight need no update: they come with their values when they enter it.
        let rows = set.window == nil ? set.index.allEntries : set.visibleEntries()
        guard rows.count <= DeltaEncoder.largestNotification else {
            // More updates than one notification carries: the subscribers resync instead.
            set.coalescing = nil
            set.transaction = number
            for id in set.subscribers.sorted() {
                guard var subscription = table[id] else { continue }
                subscription.seq += 1
                table[id] = subscription
                context.notify(
                    ResultsDidInvalidate.self, .init(subscription: id, reason: "largeTransaction"),
                    to: subscription.routingID)
            }
            return
        }
        var changes: [Int64: SortKey?] = [:]
        var touched: [Int64: Set<String>] = [:]
        for entry in rows {
            changes[entry.id] = .some(entry.key)
            touched[entry.id] = changed
        }
        try announce(
            changes, touched: touched, of: set, transaction: number, store: store, into: &outgoing, reads: &reads,
            context: context
        ) { () throws(RPCError) in nil }
    }

    /// `store`, or the error of a commit published without a snapshot where one is needed.
    private static func required(_ store: Store?) throws(RPCError) -> Store {
        guard let store else { throw RPCError.internalError("no snapshot was taken for the commit") }
        return store
    }

    /// Announces a coalescing set's open window as one `results/didChange`
    /// (a lane job: `snapshot` holds exactly the state the set reflects).
    private func flush(_ set: ResultSet, snapshot: Result<Store, RPCError>, context: some ResultsContext) {
        owned()
        guard index.contains(set), let window = set.coalescing else { return }
        set.coalescing = nil
        let delta = window.composed(
            sections: set.visibleSections, position: { set.visiblePosition(of: $0) },
            key: { set.index.entry(for: $0)?.key })
        guard !delta.isEmpty else { return }
        let (first, last) = (window.first, window.last)
        var outgoing = Outgoing()
        defer { outgoing.send(context) }
        var reads = ServerStats.StoreReads()
        defer { context.storeReadsMade(reads) }
        do {
            try deliver(
                delta, of: set, transaction: last, transactions: first == last ? nil : [first, last], rows: nil,
                store: snapshot.get(), into: &outgoing, reads: &reads, context: context)
        } catch {
            context.logger.error(
                "fetched results for \(set.plan.entity.name) could not announce transactions \(first)...\(last): \(error); rebuilding and invalidating"
            )
            invalidate(set, reason: "error", store: try? snapshot.get(), context: context)
        }
    }

    /// Flushes the open window of the set behind `subscription`, if any (a lane job).
    private func flush(subscription: String, snapshot: Result<Store, RPCError>, context: some ResultsContext) {
        guard let setKey = table[subscription]?.setKey, let set = index[setKey], set.coalesceMilliseconds != nil
        else { return }
        flush(set, snapshot: snapshot, context: context)
    }

    /// The notifications a lane job sends when it ends, in one send.
    struct Outgoing {
        var messages: [(bytes: [UInt8], peer: [UInt8])] = []
        /// The subscriptions that got a `results/didChange`, for the statistics.
        var notified: [String] = []
        /// The objects the job's notifications carry, encoded once for every set showing them.
        var encoded = EncodedObjects()

        func send(_ context: some ResultsContext) {
            guard !messages.isEmpty else { return }
            context.send(messages)
            context.didChangeSent(to: notified)
        }
    }

    /// Encodes the delta once and queues each subscriber's notification, with its own `subscription` and `seq`.
    private func deliver(
        _ delta: ResultSet.Delta, of set: ResultSet, transaction: Int64, transactions: [Int64]?,
        rows: [Int64: EvaluationRow]?, store: Store?, into outgoing: inout Outgoing,
        reads: inout ServerStats.StoreReads,
        context: some ResultsContext
    ) throws(RPCError) {
        // One notification carrying more objects than this would be larger than resyncing.
        var shared = try DeltaEncoder.shared(
            delta, of: set, transactions: transactions, rows: rows, store: store, encoded: &outgoing.encoded,
            reads: &reads)
        if let graph = set.related, let bytes = shared {
            shared = try graph.decorate(bytes, store: try Self.required(store))
        }
        for id in set.subscribers.sorted() {
            guard var subscription = table[id] else { continue }
            subscription.seq += 1
            if let shared {
                if !overflows(&subscription, context: context) {
                    outgoing.messages.append(
                        (
                            DeltaEncoder.didChange(shared, subscription: subscription, transaction: transaction),
                            subscription.routingID
                        ))
                    outgoing.notified.append(id)
                }
            } else {
                context.notify(
                    ResultsDidInvalidate.self, .init(subscription: id, reason: "largeTransaction"),
                    to: subscription.routingID)
            }
            table[id] = subscription
        }
    }

    /// After a failure to follow a transaction: rebuilds `set` from the store
    /// and tells its subscribers to resync (`results/didInvalidate`); when even
    /// the rebuild fails, the set and its subscriptions are dropped (giving
    /// their places in their sessions' quotas back), so that a resync finds no
    /// stale results and subscribes again.
    private func invalidate(_ set: ResultSet, reason: String, store: Store?, context: some ResultsContext) {
        owned()
        guard index.contains(set) else { return }
        set.coalescing = nil
        let rebuilt: Void? = try? store.map { store throws(RPCError) in
            try set.read(from: store)
            try set.related?.build(rows: set.visibleEntries().map(\.id), store: store)
        }
        if rebuilt == nil { index.uninstall(set.key) }
        var told: [(id: String, routingID: [UInt8])] = []
        for id in set.subscribers.sorted() {
            guard let subscription = table[id] else { continue }
            if rebuilt == nil { table.remove(id) }
            told.append((id, subscription.routingID))
        }
        // The counts others read are right before anyone hears of the drop.
        mirror()
        for (id, routingID) in told {
            context.notify(ResultsDidInvalidate.self, .init(subscription: id, reason: reason), to: routingID)
        }
    }

    /// Drops every result set and tells each subscriber to resync (`results/didInvalidate`):
    /// the store can no longer follow its commits (a cluster replica that diverged).
    func invalidateAll(reason: String, context: some ResultsContext) {
        lane.enqueue { [self] in resyncAll(reason: reason, store: nil, context: context) }
    }

    /// In a lane job: rebuilds every result set from `store` (drops them all if `store` is nil or
    /// a rebuild fails) and tells each subscriber to resync (`results/didInvalidate`).
    func resyncAll(reason: String, store: Store?, context: some ResultsContext) {
        owned()
        for set in Array(index.sets.values) { invalidate(set, reason: reason, store: store, context: context) }
    }
}
