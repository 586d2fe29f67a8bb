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
struct FetchedResultsBenchmark {
    let rows: Int
    let samples: Int

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

    func run(depotd: URL) async throws -> Report {
        let daemon = try BenchmarkDaemon(executable: depotd)
        defer { daemon.stop() }
        let writer = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        let watcher = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        _ = try await writer.call(
            ModelDefine.self,
            .init(entities: [
                EntityDescription(
                    name: "Item",
                    attributes: [
                        AttributeDescription(name: "name", type: .string),
                        AttributeDescription(name: "createdAt", type: .date, indexed: true),
                        AttributeDescription(name: "done", type: .boolean, defaultValue: false),
                    ])
            ]))
        let loadStart = ContinuousClock.now
        let chunk = 20_000
        var loaded = 0
        while loaded < rows {
            let count = min(chunk, rows - loaded)
            let objects = (loaded..<loaded + count).map { index in
                InsertedObject(
                    entity: "Item",
                    values: [
                        "name": .string("item \(index)"),
                        "createdAt": .string(ISO8601Text.string(seconds: 1_700_000_000 + Double(index) * 0.5)),
                    ])
            }
            _ = try await writer.call(StoreSave.self, .init(inserted: objects), timeout: .seconds(600))
            loaded += count
        }
        let loadSeconds = (ContinuousClock.now - loadStart).seconds

        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        let subscribeStart = ContinuousClock.now
        let subscription = try await watcher.call(
            ResultsSubscribe.self, .init(request: request, include: .noObjects), timeout: .seconds(600))
        let subscribeSeconds = (ContinuousClock.now - subscribeStart).seconds
        let rssBefore = daemon.residentBytes()
        var reversed = request
        reversed.sort = [SortDescriptor(key: "createdAt", ascending: false)]
        let second = try await watcher.call(
            ResultsSubscribe.self, .init(request: reversed, include: .noObjects), timeout: .seconds(600))
        let rssAfter = daemon.residentBytes()
        _ = try await watcher.call(ResultsUnsubscribe.self, .init(subscription: second.subscription))

        let arrivals = ArrivalLog(watcher, subscription: subscription.subscription)
        var generator = SystemRandomNumberGenerator()
        var incremental: [Double] = []
        for sample in 0..<samples {
            let row = Int.random(in: 1...rows, using: &generator)
            let moved = ISO8601Text.string(
                seconds: 1_700_000_000 + Double.random(in: 0..<Double(rows) * 0.5, using: &generator))
            let start = ContinuousClock.now
            _ = try await writer.call(
                StoreSave.self,
                .init(updated: [UpdatedObject(id: "Item/\(row)", values: ["createdAt": .string(moved)])]))
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
            let row = Int.random(in: 1...rows, using: &generator)
            let moved = ISO8601Text.string(
                seconds: 1_700_000_000 + Double.random(in: 0..<Double(rows) * 0.5, using: &generator))
            let start = ContinuousClock.now
            _ = try await writer.call(
                StoreSave.self,
                .init(updated: [UpdatedObject(id: "Item/\(row)", values: ["createdAt": .string(moved)])]))
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
}

/// Records when each `results/didChange` of one subscription arrived (on the client's thread).
final class ArrivalLog: @unchecked Sendable {
    private let lock = NSLock()
    private var arrivals: [Int64: ContinuousClock.Instant] = [:]
    private var task: Task<Void, Never>?

    init(_ connection: DepotConnection, subscription: String) {
        let stream = connection.notifications()
        task = Task { [weak self] in
            for await note in stream {
                let now = ContinuousClock.now
                guard let change = note.decode(ResultsDidChange.self), change.subscription == subscription else {
                    continue
                }
                self?.lock.withLock { self?.arrivals[change.seq] = now }
            }
        }
    }

    func wait(for seq: Int64, timeout: Duration = .seconds(30)) async -> ContinuousClock.Instant? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let instant = lock.withLock({ arrivals[seq] }) { return instant }
            await Task.yield()
        }
        return nil
    }
}
