import DepotClient
import DepotProtocol
import Foundation

/// Issue 5's benchmark: a subscription over N Items sorted by createdAt.
///
/// Measures, in one run against one daemon: the latency from `store/save` of
/// one changed object to the subscriber's `results/didChange` (incremental
/// engine), against a refetch-and-diff baseline (after the same save, fetch
/// every id in order and diff with the previous list); and the daemon's RSS
/// growth per subscribed row (a second result set over the same rows).
struct FetchedResultsLatencyBenchmark: Benchmark {
    static let name = "results-latency"
    static let summary =
        "save → results/didChange p50/p99 vs refetch-and-diff (≥ 100×), p50 < 0.5 ms, p99 < 2 ms, RSS < 64 B/row"

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let report = try await measure(suite, rows: quick ? 50_000 : 1_000_000, samples: quick ? 50 : 300)
        suite.noteReport(report)
        suite.check(
            "results.speedup-p50", report.speedupP50, target: 100, of: "refetch-and-diff p50", over: "didChange p50")
        suite.check("results.didChange-p50-ms", report.incrementalP50Ms, target: 0.5, .atMost, of: "ms")
        suite.check("results.didChange-p99-ms", report.incrementalP99Ms, target: 2, .atMost, of: "ms")
        suite.check("results.rss-bytes-per-row", report.rssBytesPerRow, target: 64, .atMost, of: "bytes")
    }

    struct Report: Codable {
        var rows: Int
        var samples: Int
        var incrementalP50Ms: Double
        var incrementalP99Ms: Double
        var refetchP50Ms: Double
        var refetchP99Ms: Double
        var speedupP50: Double
        var rssBytesPerRow: Double
        var subscribeSeconds: Double
        var loadSeconds: Double
    }

    private func measure(_ suite: SuiteRun, rows: Int, samples: Int) async throws -> Report {
        let daemon = try suite.startDaemon(.tcp)
        defer { daemon.stop() }
        let writer = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        let watcher = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        _ = try await writer.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
        let loadStart = ContinuousClock.now
        try await ItemSeed.save(rows, through: writer)
        let loadSeconds = (ContinuousClock.now - loadStart).seconds

        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        let subscribeStart = ContinuousClock.now
        let subscription = try await watcher.call(
            ResultsSubscribe.self, .init(request: request, include: .noObjects), timeout: .seconds(600))
        let subscribeSeconds = (ContinuousClock.now - subscribeStart).seconds
        let rssBefore = Int(daemon.memory()?.residentBytes ?? 0)
        var reversed = request
        reversed.sort = [SortDescriptor(key: "createdAt", ascending: false)]
        let second = try await watcher.call(
            ResultsSubscribe.self, .init(request: reversed, include: .noObjects), timeout: .seconds(600))
        let rssAfter = Int(daemon.memory()?.residentBytes ?? 0)
        _ = try await watcher.call(ResultsUnsubscribe.self, .init(subscription: second.subscription))

        let arrivals = ArrivalLog(watcher, subscription: subscription.subscription)
        var generator = SystemRandomNumberGenerator()
        var incremental: [Double] = []
        for sample in 0..<samples {
            let move = Self.randomMove(rows: rows, using: &generator)
            let start = ContinuousClock.now
            _ = try await writer.call(StoreSave.self, move)
            guard let arrived = await arrivals.wait(for: Int64(sample + 1)) else {
                throw BenchmarkError("no didChange for sample \(sample)")
            }
            incremental.append((arrived - start).milliseconds)
        }

        var refetch: [Double] = []
        var previous =
            try await writer.call(
                StoreFetch.self, FetchRequest(entity: "Item", sort: request.sort, resultType: .ids),
                timeout: .seconds(600)
            ).ids ?? []
        for _ in 0..<max(3, samples / 20) {
            let move = Self.randomMove(rows: rows, using: &generator)
            let start = ContinuousClock.now
            _ = try await writer.call(StoreSave.self, move)
            let ids =
                try await writer.call(
                    StoreFetch.self, FetchRequest(entity: "Item", sort: request.sort, resultType: .ids),
                    timeout: .seconds(600)
                ).ids ?? []
            _ = ids.difference(from: previous)
            previous = ids
            refetch.append((ContinuousClock.now - start).milliseconds)
        }
        writer.abort()
        watcher.abort()
        let incrementalP50 = percentile(incremental, 0.5)
        let refetchP50 = percentile(refetch, 0.5)
        return Report(
            rows: rows, samples: samples, incrementalP50Ms: incrementalP50,
            incrementalP99Ms: percentile(incremental, 0.99),
            refetchP50Ms: refetchP50, refetchP99Ms: percentile(refetch, 0.99), speedupP50: refetchP50 / incrementalP50,
            rssBytesPerRow: Double(max(0, rssAfter - rssBefore)) / Double(rows), subscribeSeconds: subscribeSeconds,
            loadSeconds: loadSeconds)
    }

    /// A save that moves a random Item to a random `createdAt`, so that its row moves in the sorted results.
    private static func randomMove(rows: Int, using generator: inout some RandomNumberGenerator)
        -> StoreSave.Parameters
    {
        let row = Int.random(in: 1...rows, using: &generator)
        let moved = ItemSeed.createdAt(0) + Double.random(in: 0..<Double(rows) * 0.5, using: &generator)
        return .init(updated: [
            UpdatedObject(id: "Item/\(row)", values: ["createdAt": .string(ISO8601Text.string(seconds: moved))])
        ])
    }
}

/// Records when each `results/didChange` of one subscription arrived (on the client's thread).
///
/// A waiter is suspended until its change arrives, not spinning: on a two-core machine a spinning
/// waiter takes a core from the daemon and the client's own threads, and the figure measured its
/// contention (session 11; before, `wait(for:)` looped on `Task.yield()`).
final class ArrivalLog: @unchecked Sendable {
    private let lock = NSLock()
    private var arrivals: [Int64: ContinuousClock.Instant] = [:]
    private var byTransaction: [(transaction: Int64, at: ContinuousClock.Instant)] = []
    /// Who waits for each seq not arrived yet.
    private var waiters: [Int64: [CheckedContinuation<ContinuousClock.Instant?, Never>]] = [:]
    private var task: Task<Void, Never>?

    init(_ connection: DepotConnection, subscription: String) {
        let stream = connection.notifications()
        task = Task { [weak self] in
            for await note in stream {
                let now = ContinuousClock.now
                guard let change = note.decode(ResultsDidChange.self), change.subscription == subscription else {
                    continue
                }
                let waiting = self?.lock.withLock { () -> [CheckedContinuation<ContinuousClock.Instant?, Never>] in
                    self?.arrivals[change.seq] = now
                    self?.byTransaction.append((change.transaction, now))
                    return self?.waiters.removeValue(forKey: change.seq) ?? []
                }
                waiting?.forEach { $0.resume(returning: now) }
            }
        }
    }

    /// When change `seq` arrived, waiting for it up to `timeout` (`nil` if it did not come).
    func wait(for seq: Int64, timeout: Duration = .seconds(30)) async -> ContinuousClock.Instant? {
        await withCheckedContinuation { continuation in
            let arrived = lock.withLock { () -> ContinuousClock.Instant? in
                if let instant = arrivals[seq] { return instant }
                waiters[seq, default: []].append(continuation)
                return nil
            }
            if let arrived { return continuation.resume(returning: arrived) }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                let expired = self?.lock.withLock { self?.waiters.removeValue(forKey: seq) } ?? nil
                expired?.forEach { $0.resume(returning: nil) }
            }
        }
    }

    /// When the first `results/didChange` through `transaction` (its own, or a later one when
    /// the transaction changed nothing the subscription shows) arrived. Polls every millisecond
    /// rather than spinning: for reading arrivals after the writes, not in a hot loop.
    func arrival(through transaction: Int64, timeout: Duration = .seconds(60)) async -> ContinuousClock.Instant? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let instant = lock.withLock({ byTransaction.first { $0.transaction >= transaction }?.at }) {
                return instant
            }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return nil
    }
}
