import DepotProtocol
import DepotStore
import Synchronization

/// Every `store/observe` observer, owned by the publish lane (``PublishLane``)
/// beside the fetched-results engine's subscriptions: one concurrency model,
/// and no lock on the publish path.
///
/// Registering, removing, re-scoping and publishing are lane jobs, so they see
/// the observers one at a time, in commit order. `store/observe` is answered
/// from its registration job (after the scoped observer's baseline is read):
/// a save its client sends after the answer is heard. `store/unobserve` is
/// answered from its removal job: nothing is heard of the observer after it.
///
/// Guarded:
/// - `table`: touched only in lane jobs (`owned()`, on in release builds too).
/// - `needs`, `registering`: what the writer reads to tell whether publishing a
///   commit needs a snapshot (``needsSnapshot(for:)``), mirrored from `table` by the lane jobs.
final class ObserverLane: @unchecked Sendable {
    private let lane: PublishLane
    private var table = ObserverTable()
    /// Registrations and re-scopings on their way to the lane: what they need is not mirrored yet.
    private let registering = Atomic<Int>(0)
    private let needs = Mutex(Needs())
    /// Where commits' row images are asked for, for the entities whose values observers take from them.
    private let imaging: @Sendable (Set<String>) -> Void

    /// What publishing a commit to the observers may read, as of the last lane job that changed them.
    struct Needs: Sendable, Equatable {
        /// A scoped observer's baseline is not read yet, or one of its rules does not evaluate in memory.
        var readsStore = false
        /// The entities whose changed rows' values observers take (for `includeValues`, or to check a scope in memory).
        var imaged: Set<String> = []
        /// An observer takes the values of every entity (`includeValues` without `entities`).
        var everyEntity = false
    }

    /// Observers whose state `lane` owns; `imaging` asks the store for the row images they use.
    init(lane: PublishLane, imaging: @escaping @Sendable (Set<String>) -> Void = { _ in }) {
        self.lane = lane
        self.imaging = imaging
    }

    /// Checks that the caller is a lane job, in every build: a lock-free table touched elsewhere
    /// would be a data race (the check is one atomic load).
    private func owned() {
        precondition(lane.isRunningJob, "store/observe observers touched outside the publish lane")
    }

    /// Mirrors what the observers need for the writer (in a lane job, after the table changed).
    private func mirror(schema: Schema) {
        var next = Needs()
        for registration in table.registrations {
            if let scoped = registration.scoped {
                if scoped.readsStore { next.readsStore = true }
                next.imaged.formUnion(scoped.imagedEntities)
            }
            guard registration.parameters.includeValues == true else { continue }
            if let entities = registration.parameters.entities {
                next.imaged.formUnion(entities)
            } else {
                next.everyEntity = true
            }
        }
        let old = needs.withLock { needs in
            defer { needs = next }
            return needs
        }
        guard old.imaged != next.imaged || old.everyEntity != next.everyEntity else { return }
        imaging(next.everyEntity ? next.imaged.union(schema.entities.map(\.name)) : next.imaged)
    }

    // MARK: What the writer asks

    /// Whether publishing a commit to the observers may read the store: some observer checks a
    /// scope or takes values, or one is on its way (unscoped observers without values never read).
    var mayRead: Bool {
        if registering.load(ordering: .sequentiallyConsistent) > 0 { return true }
        let needs = needs.withLock { $0 }
        return needs.readsStore || needs.everyEntity || !needs.imaged.isEmpty
    }

    /// Whether every observer follows commits from their row images alone (none checks a scope through
    /// the store, none is on its way to the lane): publishing a save then takes no snapshot, unless
    /// it carries no images of an entity whose values an observer takes (too large, or just asked for).
    var followsFromImagesAlone: Bool {
        registering.load(ordering: .sequentiallyConsistent) == 0 && !needs.withLock { $0.readsStore }
    }

    /// Whether publishing `transactions` to the observers needs a snapshot of the store: a scoped
    /// observer reads it, or an observer takes values of rows the commits carry no images of.
    func needsSnapshot(for transactions: [CommittedTransaction]) -> Bool {
        if registering.load(ordering: .sequentiallyConsistent) > 0 { return true }
        let needs = needs.withLock { $0 }
        if needs.readsStore { return true }
        guard needs.everyEntity || !needs.imaged.isEmpty else { return false }
        for transaction in transactions {
            // A transaction whose values no notification carries (a big batch) needs none of them.
            let changed = transaction.changes.values.reduce(0) { $0 + $1.inserted.count + $1.updated.count }
            if changed > DeltaEncoder.largestNotification { continue }
            for (entity, changes) in transaction.changes
            where !(changes.inserted.isEmpty && changes.updated.isEmpty) && transaction.images[entity] == nil {
                if needs.everyEntity || needs.imaged.contains(entity) { return true }
            }
        }
        return false
    }

    // MARK: Registering

    /// `store/observe`: registers the observer in the lane, after every commit so far, and
    /// answers with its id from there. A scoped observer's baseline is read in the same job
    /// (it hears of every commit after it, none before); when it cannot be read the request
    /// fails with the reason and nothing is registered.
    ///
    /// - Parameter isOpen: whether the session is still open (a closed one registers nothing).
    func observe(
        _ registration: ObserverRegistration, routingID: [UInt8], isOpen: @escaping @Sendable () -> Bool,
        context: some ResultsContext, reply: Reply
    ) {
        // Counted before the job takes its place: a commit queued after it is published with a
        // snapshot until the job mirrored what the new observer needs.
        registering.add(1, ordering: .sequentiallyConsistent)
        context.afterCommits { [self] snapshot in
            defer { registering.subtract(1, ordering: .sequentiallyConsistent) }
            reply(
                Result { () throws(RPCError) -> [UInt8] in
                    owned()
                    guard isOpen() else {
                        throw RPCError(code: .serverNotInitialized, message: "the session is closed")
                    }
                    var terms: [String: ObserverFiling.Term]?
                    if let scoped = registration.scoped {
                        do throws(RPCError) {
                            terms = try scoped.start(scope: scoped.scope, store: snapshot.get())
                        } catch {
                            context.logger.error(
                                "store/observe of a scoped key is refused: its scope could not be read: \(error.message)"
                            )
                            throw error
                        }
                    }
                    let id = table.add(registration, routingID: routingID)
                    if terms != nil { table.file(id, routingID: routingID, terms: terms) }
                    mirror(schema: (try? snapshot.get().schema) ?? context.currentSchema)
                    return try JSONCoding.encodeBytes(StoreObserve.Result(observer: id))
                })
        }
    }

    /// `store/unobserve`: removes the observer in the lane and answers from there (`null`), or
    /// -32004 when the session has no such observer.
    func unobserve(_ id: String, routingID: [UInt8], context: some ObservationContext, reply: Reply) {
        lane.enqueue { [self] in
            owned()
            guard table.remove(id, routingID: routingID) else {
                return reply(.failure(.notFound("no observer '\(id)' in this session", id: id)))
            }
            mirror(schema: context.currentSchema)
            reply(.success(Array("null".utf8)))
        }
    }

    /// Removes every observer of the session `routingID` (closed or expired), in the lane.
    func removeObservers(of routingID: [UInt8], context: some ObservationContext) {
        lane.enqueue { [self] in
            owned()
            guard table.count(of: routingID) > 0 else { return }
            table.removeAll(of: routingID)
            mirror(schema: context.currentSchema)
        }
    }

    /// Reads the baseline of every scoped observer of the sessions `routingIDs` again, with
    /// `scope` (or each one's own when `nil`: a key that lost its scope keeps the old one, narrower
    /// never wider), in the lane after every commit so far. One that cannot be read is removed,
    /// logged, and its client gets `store/observeDidEnd`.
    func rescope(_ routingIDs: [[UInt8]], scope: KeyScope?, context: some ResultsContext) {
        registering.add(1, ordering: .sequentiallyConsistent)
        context.afterCommits { [self] snapshot in
            defer { registering.subtract(1, ordering: .sequentiallyConsistent) }
            owned()
            for (routingID, observer, scoped) in table.scoped(of: routingIDs) {
                do throws(RPCError) {
                    let terms = try scoped.start(scope: scope ?? scoped.scope, store: snapshot.get())
                    table.file(observer, routingID: routingID, terms: terms)
                } catch {
                    table.remove(observer, routingID: routingID)
                    context.logger.error(
                        "store/observe \(observer) of a scoped key is removed: its scope could not be read: \(error.message)"
                    )
                    context.notify(
                        ObserveDidEnd.self, .init(observer: observer, reason: "error", message: error.message),
                        to: routingID)
                }
            }
            mirror(schema: (try? snapshot.get().schema) ?? context.currentSchema)
        }
    }

    // MARK: Publishing

    /// Sends every observer `transaction` concerns its `store/didSave` (a lane job, in commit
    /// order); `store` reads the state right after the commit, `nil` when the writer took no
    /// snapshot (``needsSnapshot(for:)``). Observers whose scope cannot be evaluated end.
    ///
    /// - Parameter countsCommit: whether reads made here count as a commit of their own in `server/stats`.
    func publish(
        _ transaction: CommittedTransaction, store: Store?, countsCommit: Bool, context: some ObservationContext
    ) {
        owned()
        guard !table.isEmpty else { return }
        let ended = ObservationCenter.publish(
            transaction, to: table.observers(concerning: transaction), store: store, countsCommit: countsCommit,
            context: context)
        guard !ended.isEmpty else { return }
        for entry in ended { table.remove(entry.observer, routingID: entry.routingID) }
        mirror(schema: store?.schema ?? context.currentSchema)
    }

    /// How many observers each of the sessions `routingIDs` has (for `server/stats`).
    func counts(of routingIDs: [[UInt8]]) -> [[UInt8]: Int] {
        lane.perform { [self] in
            owned()
            return Dictionary(routingIDs.map { ($0, table.count(of: $0)) }, uniquingKeysWith: { first, _ in first })
        }
    }
}
