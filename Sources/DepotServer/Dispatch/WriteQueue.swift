import DepotProtocol
import DepotStore
import Dispatch
import Synchronization

/// What the writer tells about its commits: how to publish them.
protocol CommitSubscriber: AnyObject, Sendable {
    /// Whether publishing a commit now would read the store (it then gets a snapshot).
    var publishingReads: Bool { get }

    /// Whether publishing `transactions` (just committed, not yet published) reads the store, so
    /// that it needs a snapshot; asked only when ``publishingReads`` says yes.
    func needsSnapshot(for transactions: [CommittedTransaction]) -> Bool

    /// Publishes `transaction` (in the publish lane, in commit order). `store`
    /// reads the state right after the write that committed it (after the
    /// whole group, for a group commit), or says why no snapshot could be
    /// taken; `nil` when ``publishingReads`` or ``needsSnapshot(for:)`` said no.
    func publish(_ transaction: CommittedTransaction, store: Result<Store, RPCError>?)

    /// Tells every subscriber to resync (in the publish lane, in commit order): the store, a
    /// cluster's replica, rebuilt itself from the cluster's snapshot. `store` reads the rebuilt state.
    func storeWasRebuilt(_ store: Result<Store, RPCError>)
}

extension CommitSubscriber {
    /// Every publish that reads takes a snapshot, unless the subscriber tells better.
    func needsSnapshot(for transactions: [CommittedTransaction]) -> Bool { true }
}

/// The single writer, in arrival order, with group commit; what follows each
/// commit runs in the ``PublishLane``, off the writer.
///
/// Every write request takes its place in one list; the writer queue takes
/// from its head. A run of saves at the head (requests whose handler is
/// ``Handler/groupable``) is taken whole, up to ``largestGroup``, and run in
/// one SQLite transaction, each save in a savepoint of its own
/// (``WriteGroup``): one commit pays for all of them, a save that fails rolls
/// back only itself. Each save stays its own logical transaction (number,
/// history entry, notifications). Anything else (batches, model changes)
/// runs alone, in its place.
///
/// After a write (or a group) the writer hands the lane one job: publish what
/// it committed, in transaction order, then send its responses. The lane runs
/// jobs in the writer's order, so the contract's order (a transaction's
/// notifications before its response, T before T+1) holds, while the writer
/// already runs the next write.
///
/// A save that finds the writer idle runs on the thread that received it (a
/// `sync` on the idle writer queue runs there): no hand-off to a worker and
/// back, which is most of a small save's cost. Saves that arrive while the
/// writer is busy queue up and commit as a group. Likewise, when no write
/// waits and the lane is empty, a commit is published at once where it
/// committed: the hand-off would cost more than it saves. Under load, the
/// lane takes over.
final class WriteQueue: Sendable {
    /// One write waiting for the writer.
    struct Entry: Sendable {
        /// Whether it may commit together with its neighbours.
        let groupable: Bool
        /// Runs it, inside the group commit's transaction when there is one;
        /// returns its response, or `nil` when it has none (a batch of notifications).
        let run: @Sendable (WriteGroup?) -> [UInt8]?
        /// Sends its response.
        let send: @Sendable ([UInt8]) -> Void
        /// Its error response when the group's commit fails.
        let failure: @Sendable (RPCError) -> [UInt8]
        /// The session that sent it: a write never runs before an earlier one of its session.
        var session: [UInt8] = []
        /// Whether it can run without waiting: a batch still being checked off the writer
        /// (``WritePreparation``) is not; later writes of other sessions go first, and it runs
        /// only once ready (whoever makes it ready calls ``WriteQueue/wake(_:)``).
        var isReady: @Sendable () -> Bool = { true }
    }

    /// The most saves one transaction commits.
    static let largestGroup = 64

    /// The serial queue everything that writes runs on.
    private let queue: DispatchQueue
    /// Where what follows each commit runs.
    let lane: PublishLane
    private let store: Store
    private let pending = Mutex<[Entry]>([])
    /// Blocks submitted to ``queue`` and not yet finished: zero means the writer is idle.
    private let outstanding = Atomic<Int>(0)
    private let onWriter = DispatchSpecificKey<Bool>()

    /// A writer for `store`.
    init(store: Store) {
        self.store = store
        let queue = DispatchQueue(label: "depot.writer")
        self.queue = queue
        lane = PublishLane(store: store, writer: queue)
        queue.setSpecific(key: onWriter, value: true)
    }

    /// How many writes wait (for stats and back-pressure).
    var depth: Int { pending.withLock { $0.count } }

    /// Queues `entry` behind every write that arrived before it; `subscriber` publishes its commits.
    ///
    /// With `runHereIfIdle`, an entry that finds the writer idle runs at once
    /// on the calling thread, still exclusive of every other writer work.
    func enqueue(_ entry: Entry, subscriber: some CommitSubscriber, runHereIfIdle: Bool = false) {
        let idle = pending.withLock { list in
            list.append(entry)
            return list.count == 1
        }
        if runHereIfIdle, idle, outstanding.load(ordering: .acquiring) == 0 {
            // Idle as far as can be told: the sync runs here. Should a block slip in first,
            // it waits for that one (a rare, bounded wait), never for a queue of them.
            return sync { drain(subscriber) }
        }
        async { [self] in drain(subscriber) }
    }

    /// Runs the writer again after a write that was not ready (``Entry/isReady``) became ready.
    func wake(_ subscriber: some CommitSubscriber) {
        async { [self] in drain(subscriber) }
    }

    /// Runs `body` on the writer queue, after the writes queued before it.
    func async(_ body: @escaping @Sendable () -> Void) {
        outstanding.add(1, ordering: .releasing)
        queue.async { [self] in
            body()
            outstanding.subtract(1, ordering: .releasing)
        }
    }

    /// Runs `body` on the writer queue `delay` from now.
    func asyncAfter(_ delay: DispatchTimeInterval, _ body: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + delay) { [self] in async(body) }
    }

    /// Runs `body` on the writer queue, between writes, and returns its result.
    func sync<T, Failure: Error>(_ body: () throws(Failure) -> T) throws(Failure) -> T {
        if DispatchQueue.getSpecific(key: onWriter) == true { return try body() }
        outstanding.add(1, ordering: .releasing)
        defer { outstanding.subtract(1, ordering: .releasing) }
        return try queue.sync { Result { () throws(Failure) in try body() } }.get()
    }

    /// Runs `job` in the lane after everything the writer committed so far
    /// was published, with a store reading exactly that state; returns at once.
    ///
    /// The results engine registers subscriptions and answers reads this way,
    /// in order with deltas; observers register this way. Called on the writer
    /// queue (a JSON-RPC batch that writes runs there), it queues the job at once.
    func afterCommits(_ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
        if DispatchQueue.getSpecific(key: onWriter) == true { return lane.enqueueReading(job) }
        async { [lane] in lane.enqueueReading(job) }
    }

    /// Runs the head of the list: one write, or a group of saves.
    private func drain(_ subscriber: some CommitSubscriber) {
        let taken = pending.withLock { list -> [Entry] in
            guard !list.isEmpty else { return [] }
            // The first write that can run at once and has no earlier write of its session
            // waiting. When there is none, nothing runs: the writer never waits for a preparation
            // (a save arriving meanwhile would wait with it); ``wake(_:)`` drains again once one is done.
            var blocked: Set<[UInt8]> = []
            var found: Int?
            for (index, entry) in list.enumerated() {
                if blocked.contains(entry.session) { continue }
                if entry.isReady() {
                    found = index
                    break
                }
                blocked.insert(entry.session)
            }
            guard let start = found else { return [] }
            guard list[start].groupable else { return [list.remove(at: start)] }
            var group: [Entry] = []
            while start < list.count, list[start].groupable, !blocked.contains(list[start].session),
                group.count < Self.largestGroup
            {
                group.append(list.remove(at: start))
            }
            return group
        }
        guard let first = taken.first else { return }
        // A drain that found nothing ready ran nothing: the writes it skipped over, and those of their
        // sessions behind them, are left for this one's follow-up (or the wake of a preparation).
        defer { if pending.withLock({ !$0.isEmpty }) { async { [self] in drain(subscriber) } } }
        var responses: [[UInt8]?] = []
        if taken.count == 1 {
            responses = [first.run(nil)]
        } else {
            do {
                // A replica may run the group twice (its first try refused by the cluster's log):
                // the answers are the last run's, and only a committed run reports transactions.
                try store.writeGroup { group in responses = taken.map { $0.run(group) } }
            } catch {
                // Nothing committed: every save of the group fails alike, and nothing is published.
                responses = taken.map { $0.failure(error) }
            }
        }
        let replies = zip(taken, responses).compactMap { entry, bytes in bytes.map { (entry.send, $0) } }
        // Everything the write committed, in commit order: its own transactions and what a replica
        // applied of other daemons' commits before or inside it (the cluster numbers them in one order).
        let transactions = store.takeCommittedTransactions()
        // A replica that rebuilt itself from the cluster's snapshot (its log was pruned past it, or
        // it diverged): its result sets are stale, every subscriber resyncs first.
        if store.takeRebuild() { lane.enqueueReading { store in subscriber.storeWasRebuilt(store) } }
        // The lane's job: publish what the write committed, in order, then answer.
        let publishThenAnswer: @Sendable (Result<Store, RPCError>?) -> Void = { store in
            for transaction in transactions { subscriber.publish(transaction, store: store) }
            for (send, bytes) in replies { send(bytes) }
        }
        // No snapshot when the commits carry every value publishing them needs (their row images).
        guard !transactions.isEmpty, subscriber.publishingReads, subscriber.needsSnapshot(for: transactions) else {
            return lane.enqueue { publishThenAnswer(nil) }
        }
        // Nothing waits for the writer or the lane: publishing right here costs less than the
        // hand-off, and the store holds exactly this commit's state (no write can run until this returns).
        if pending.withLock({ $0.isEmpty }), lane.runIfIdle({ publishThenAnswer(.success(store)) }) { return }
        lane.enqueueReading(publishThenAnswer)
    }
}
