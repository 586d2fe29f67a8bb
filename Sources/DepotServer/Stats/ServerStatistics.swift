import DepotProtocol
import Foundation
import Synchronization

/// The daemon's running figures for `server/stats`: writer queue depth,
/// commit and delta latencies, notifications sent (by method and by
/// subscription). Everything else `server/stats` reports is read where it
/// lives (sessions, result sets, the transport's backlogs, the store's files).
///
/// Counting costs a few atomic adds and one short lock per write and per notification.
final class ServerStatistics: Sendable {
    /// When the server was created.
    let startedAt = ContinuousClock.now
    private let queued = Atomic<Int>(0)
    private let commits = Atomic<Int64>(0)
    private let commitLatency = Mutex(LatencyHistogram())
    private let deltaLatency = Mutex(LatencyHistogram())
    private let sentByMethod = Mutex<[String: Int64]>([:])
    private let sentBySubscription = Mutex<[String: Int64]>([:])
    private let storeReadCounts = Mutex(ServerStats.StoreReads())

    // MARK: The writer

    /// A write request was queued for the writer.
    func writeQueued() { queued.add(1, ordering: .relaxed) }

    /// Write requests queued or running.
    var writerQueueDepth: Int { queued.load(ordering: .relaxed) }

    /// Write requests that committed a transaction.
    var commitCount: Int64 { commits.load(ordering: .relaxed) }

    /// Runs a queued write (on the serial writer); `body` says whether it
    /// committed a transaction, whose latency is then recorded (publishing
    /// runs after it, in the publish lane, and is not part of it).
    func measureWrite(_ body: () -> Bool) {
        let start = ContinuousClock.now
        let committed = body()
        let elapsed = ContinuousClock.now - start
        queued.subtract(1, ordering: .relaxed)
        guard committed else { return }
        commits.add(1, ordering: .relaxed)
        recordCommit(elapsed)
    }

    /// Records one commit's latency.
    func recordCommit(_ duration: Duration) {
        commitLatency.withLock { $0.record(duration) }
    }

    /// Records how long computing and sending one transaction's fetched-results deltas took.
    func recordDelta(_ duration: Duration) {
        deltaLatency.withLock { $0.record(duration) }
    }

    /// The latency percentiles.
    var latency: ServerStats.Latency {
        ServerStats.Latency(
            commit: commitLatency.withLock { $0.percentiles }, delta: deltaLatency.withLock { $0.percentiles })
    }

    /// Adds what publishing one commit (or flushing one window) read of the store.
    func storeReadsMade(_ reads: ServerStats.StoreReads) {
        storeReadCounts.withLock { $0.add(reads) }
    }

    /// The store reads publishing made since start, by reason.
    var storeReads: ServerStats.StoreReads { storeReadCounts.withLock { $0 } }

    // MARK: Notifications

    /// Counts a notification queued for a client; `subscription` names the
    /// subscription of a `results/didChange`.
    func notificationSent(_ method: String, subscription: String? = nil) {
        sentByMethod.withLock { $0[method, default: 0] += 1 }
        if let subscription { sentBySubscription.withLock { $0[subscription, default: 0] += 1 } }
    }

    /// `results/didChange` notifications sent to each of `subscriptions` (one each), counted at once.
    func didChangeSent(to subscriptions: [String]) {
        guard !subscriptions.isEmpty else { return }
        sentByMethod.withLock { $0[ResultsDidChange.name, default: 0] += Int64(subscriptions.count) }
        sentBySubscription.withLock { counters in
            for subscription in subscriptions { counters[subscription, default: 0] += 1 }
        }
    }

    /// Notifications sent since start, by method.
    var notificationsByMethod: [String: Int64] { sentByMethod.withLock { $0 } }

    /// `results/didChange` notifications sent to `subscription`.
    func notificationsSent(to subscription: String) -> Int64 {
        sentBySubscription.withLock { $0[subscription] ?? 0 }
    }

    /// Forgets the counters of subscriptions that are gone.
    func forgetSubscriptions(except live: Set<String>) {
        sentBySubscription.withLock { counters in
            guard counters.count > live.count else { return }
            counters = counters.filter { live.contains($0.key) }
        }
    }

    /// How many subscriptions have a counter (for tests).
    var countedSubscriptions: Int { sentBySubscription.withLock { $0.count } }
}
