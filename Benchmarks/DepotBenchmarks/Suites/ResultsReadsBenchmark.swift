import DepotClient
import DepotProtocol
import Foundation

/// Issue 23's benchmark: `results/objects` and `results/snapshot` while another
/// client saves as fast as it can, each answer ordered with that subscription's
/// deltas (DESIGN.md §7).
///
/// One subscription over 100,000 Items sorted by `createdAt` (10,000 with
/// `--quick`); `results/objects` reads a random page of 50, `results/snapshot`
/// the ids of a 1,000-row window. The baseline, in the same run against the same
/// daemon and writer: `store/fetch` of the same page and of the same window
/// (ids), which answer without any ordering.
struct ResultsReadsBenchmark: Benchmark {
    static let name = "results-reads"
    static let summary =
        "results/objects and results/snapshot p50/p99 under a concurrent writer vs the same reads by store/fetch"

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let report = try await measure(suite, rows: quick ? 10_000 : 100_000, samples: quick ? 100 : 1_000)
        suite.noteReport(report)
        suite.check(
            "results-reads.objects-p50", report.fetchPageP50Ms / report.objectsP50Ms, target: nil,
            of: "store/fetch page p50", over: "results/objects p50")
        suite.check(
            "results-reads.snapshot-p50", report.fetchWindowP50Ms / report.snapshotP50Ms, target: nil,
            of: "store/fetch ids p50", over: "results/snapshot p50")
        suite.check("results-reads.objects-p99-ms", report.objectsP99Ms, target: nil, .atMost, of: "ms")
        suite.check("results-reads.snapshot-p99-ms", report.snapshotP99Ms, target: nil, .atMost, of: "ms")
    }

    struct Report: Codable {
        var rows: Int
        var samples: Int
        var objectsP50Ms: Double
        var objectsP99Ms: Double
        var fetchPageP50Ms: Double
        var fetchPageP99Ms: Double
        var snapshotP50Ms: Double
        var snapshotP99Ms: Double
        var fetchWindowP50Ms: Double
        var fetchWindowP99Ms: Double
        /// Saves the writer committed while the reads ran.
        var concurrentSaves: Int
    }

    private func measure(_ suite: SuiteRun, rows: Int, samples: Int) async throws -> Report {
        let daemon = try suite.startDaemon(.tcp)
        defer { daemon.stop() }
        let writer = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        let reader = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        try await ItemSeed.load(rows, into: daemon, connection: writer)
        let sort = [SortDescriptor(key: "createdAt")]
        let all = try await reader.call(
            ResultsSubscribe.self, .init(request: FetchRequest(entity: "Item", sort: sort), include: .noObjects),
            timeout: .seconds(600))
        let window = FetchRequest(entity: "Item", sort: sort, limit: 1_000, offset: rows / 2)
        let windowed = try await reader.call(
            ResultsSubscribe.self, .init(request: window, include: .noObjects), timeout: .seconds(600))

        // The writer moves random rows, so the reads race with deltas of both subscriptions.
        let saves = SaveCounter()
        let writing = Task {
            var generator = SystemRandomNumberGenerator()
            while !Task.isCancelled {
                let row = Int.random(in: 1...rows, using: &generator)
                let moved = ItemSeed.createdAt(Int.random(in: 0..<rows, using: &generator)) + 0.25
                _ = try? await writer.call(
                    StoreSave.self,
                    .init(updated: [
                        UpdatedObject(
                            id: "Item/\(row)", values: ["createdAt": .string(ISO8601Text.string(seconds: moved))])
                    ]))
                saves.add()
            }
        }
        defer { writing.cancel() }

        var generator = SystemRandomNumberGenerator()
        var objects: [Double] = []
        var fetchPage: [Double] = []
        var snapshot: [Double] = []
        var fetchWindow: [Double] = []
        for _ in 0..<samples {
            let offset = Int.random(in: 0..<(rows - 50), using: &generator)
            var start = ContinuousClock.now
            _ = try await reader.call(
                ResultsObjects.self, .init(subscription: all.subscription, offset: offset, length: 50))
            objects.append((ContinuousClock.now - start).milliseconds)
            start = ContinuousClock.now
            _ = try await reader.call(
                StoreFetch.self, FetchRequest(entity: "Item", sort: sort, limit: 50, offset: offset))
            fetchPage.append((ContinuousClock.now - start).milliseconds)
            start = ContinuousClock.now
            _ = try await reader.call(ResultsSnapshot.self, .init(subscription: windowed.subscription))
            snapshot.append((ContinuousClock.now - start).milliseconds)
            start = ContinuousClock.now
            var ids = window
            ids.resultType = .ids
            _ = try await reader.call(StoreFetch.self, ids)
            fetchWindow.append((ContinuousClock.now - start).milliseconds)
        }
        writing.cancel()
        writer.abort()
        reader.abort()
        return Report(
            rows: rows, samples: samples, objectsP50Ms: percentile(objects, 0.5),
            objectsP99Ms: percentile(objects, 0.99), fetchPageP50Ms: percentile(fetchPage, 0.5),
            fetchPageP99Ms: percentile(fetchPage, 0.99), snapshotP50Ms: percentile(snapshot, 0.5),
            snapshotP99Ms: percentile(snapshot, 0.99), fetchWindowP50Ms: percentile(fetchWindow, 0.5),
            fetchWindowP99Ms: percentile(fetchWindow, 0.99), concurrentSaves: saves.count)
    }
}

/// Counts the writer's saves (from its task; read once at the end).
private final class SaveCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0

    func add() { lock.withLock { value += 1 } }
    var count: Int { lock.withLock { value } }
}
