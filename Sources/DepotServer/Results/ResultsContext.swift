import DepotProtocol
import DepotStore
import Logging

/// What the fetched-results engine may ask of the daemon around it, and
/// nothing more: send, check a peer's backlog, count, log, persist a cache,
/// and schedule lane jobs (as swift-nio hands a handler its
/// `ChannelHandlerContext` instead of the whole pipeline).
protocol ResultsContext: ObservationContext {
    /// The most subscriptions one session may hold (`--max-subscriptions-per-session`).
    var maxSubscriptionsPerSession: Int { get }
    /// Whether the daemon is shutting down (scheduled flushes are dropped).
    var isStopping: Bool { get }

    /// Queues messages, each for its peer, in order.
    func send(_ messages: [(bytes: [UInt8], peer: [UInt8])])
    /// Whether `peer`'s outbound queue is past the slow-consumer limit.
    func isOverflowing(_ peer: [UInt8]) -> Bool
    /// Counts the `results/didChange` notifications just sent, one to each of `subscriptions`.
    func didChangeSent(to subscriptions: [String])
    /// Writes a named results cache, on the writer, after the writes queued so far; a failure is logged.
    func persistCache(_ name: String, _ entry: ResultsCacheEntry)
    /// Runs `job` in the publish lane after every commit so far, with a store reading exactly that state.
    func afterCommits(_ job: @escaping @Sendable (Result<Store, RPCError>) -> Void)
    /// Runs `job` like ``afterCommits(_:)``, `milliseconds` from now.
    func afterCommits(in milliseconds: Int, _ job: @escaping @Sendable (Result<Store, RPCError>) -> Void)
}

extension DepotService: ResultsContext {
    var maxSubscriptionsPerSession: Int { configuration.maxSubscriptionsPerSession }

    var currentSchema: Schema { store.schema }

    func send(_ messages: [(bytes: [UInt8], peer: [UInt8])]) { outbox.send(contentsOf: messages) }

    func didChangeSent(to subscriptions: [String]) { stats.didChangeSent(to: subscriptions) }

    func storeReadsMade(_ reads: ServerStats.StoreReads) { stats.storeReadsMade(reads) }

    func persistCache(_ name: String, _ entry: ResultsCacheEntry) {
        writes.async { [self] in
            do throws(RPCError) {
                try store.saveResultsCache(name, entry)
            } catch {
                // An optimisation only: the next subscribe under that name reads afresh.
                logger.error("could not write the results cache '\(name)': \(error.message)")
            }
        }
    }

    func afterCommits(_ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
        writes.afterCommits(job)
    }

    func afterCommits(in milliseconds: Int, _ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
        writes.asyncAfter(.milliseconds(milliseconds)) { [self] in
            guard !isStopping else { return }
            writes.lane.enqueueReading(job)
        }
    }
}
