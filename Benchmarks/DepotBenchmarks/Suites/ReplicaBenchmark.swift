import DepotClient
import DepotProtocol
import Foundation

/// A controller's persistent store (DESIGN.md §9, issue 27), over 100,000 Items sorted by
/// `createdAt`, against a fresh subscribe in the same run:
///
/// - first content: from the file (the stored results announced by a controller with a
///   `persistentStore`, before the daemon answers) against a fresh controller's `performFetch()`
///   (a full subscribe); targets ≤ 50 ms and ≥ 10× sooner;
/// - catch-up after 100 remote changes (a resumed subscription: only the rows that changed since
///   the stored transaction, with their objects) against a full resubscribe, in bytes received by
///   the client (``DepotConnection/bytesReceived``); target ≤ 1% (issue 36).
struct ReplicaBenchmark: Benchmark {
    static let name = "replica"
    static let summary =
        "100,000-object controller: first content from its file vs a fresh subscribe (≤ 50 ms, ≥ 10× sooner); catch-up after 100 changes vs a full resubscribe, bytes (≤ 1%)"

    func run(_ suite: SuiteRun) async throws {
        let rows = suite.options.quick ? 10_000 : 100_000
        let rounds = suite.options.quick ? 2 : 5
        let daemon = try suite.startDaemon(.ipc, label: "replica")
        defer { daemon.stop() }
        let connection = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        try await ItemSeed.load(rows, into: daemon, connection: connection)
        let request = FetchRequest(entity: "Item", sortDescriptors: [SortDescriptor(key: "createdAt")])
        let file = suite.directory.appendingPathComponent("replica.sqlite")

        // The baseline: a fresh controller, no file; first content when performFetch() returns.
        func freshSubscribe() async throws -> (seconds: Double, bytes: Int64) {
            let controller = FetchedResultsController<DepotObject>(fetchRequest: request, connection: connection)
            let bytes = connection.bytesReceived
            let start = ContinuousClock.now
            try await controller.performFetch()
            let elapsed = Self.seconds(ContinuousClock.now - start)
            let received = connection.bytesReceived - bytes
            guard controller.fetchedIDs.count == rows else { throw BenchmarkError("fresh subscribe missed rows") }
            await controller.unsubscribe()
            return (elapsed, received)
        }
        // Depot: a controller with the file; first content when the stored results are announced.
        func fromFile() async throws -> (
            firstContent: Double, total: Double, bytes: Int64, catchUp: FetchedResultsCatchUp?
        ) {
            let controller = FetchedResultsController<DepotObject>(
                fetchRequest: request, connection: connection, persistentStore: file)
            let changes = controller.changes()
            let bytes = connection.bytesReceived
            let start = ContinuousClock.now
            let fetch = Task { try await controller.performFetch() }
            var firstContent: Double?
            for await change in changes {
                firstContent = Self.seconds(ContinuousClock.now - start)
                guard change.isReload, change.snapshot.layout.count == rows else {
                    throw BenchmarkError("the first content was not the stored results")
                }
                break
            }
            try await fetch.value
            let total = Self.seconds(ContinuousClock.now - start)
            let received = connection.bytesReceived - bytes
            let catchUp = controller.lastCatchUp
            await controller.unsubscribe()
            return (firstContent ?? .infinity, total, received, catchUp)
        }

        let filler = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        // The first fetch into an empty file returns with the results in memory, the file written behind.
        let fillStart = ContinuousClock.now
        try await filler.performFetch()
        let fillSeconds = Self.seconds(ContinuousClock.now - fillStart)
        await filler.unsubscribe()
        suite.note("firstFetchIntoEmptyFileSeconds", .double(fillSeconds))

        var fresh: [(seconds: Double, bytes: Int64)] = []
        var warm: [Double] = []
        for _ in 0..<rounds {
            fresh.append(try await freshSubscribe())
            warm.append(try await fromFile().firstContent)
        }
        let freshSeconds = fresh.map(\.seconds).sorted()[rounds / 2]
        let warmSeconds = warm.sorted()[rounds / 2]
        suite.check(
            "replica.first-content-ms", warmSeconds * 1000, target: 50, .atMost,
            of: "first content from the file (ms, median of \(rounds))")
        suite.check(
            "replica.first-content-vs-subscribe", freshSeconds / warmSeconds, target: 10, .atLeast,
            of: "fresh subscribe time", over: "first content from the file")

        // 100 remote changes: 50 renames (updates), 50 new creation dates (moves).
        var random = SystemRandomNumberGenerator()
        for index in 0..<100 {
            let id = "Item/\(Int.random(in: 1...rows, using: &random))"
            let values: [String: JSONValue] =
                index % 2 == 0
                ? ["name": .string("renamed \(index)")]
                : ["createdAt": .string(ISO8601Text.string(seconds: ItemSeed.createdAt(Int.random(in: 1...rows))))]
            _ = try await connection.call(StoreSave.self, .init(updated: [UpdatedObject(id: id, values: values)]))
        }
        let caughtUp = try await fromFile()
        let resubscribe = try await freshSubscribe()
        guard let record = caughtUp.catchUp, !record.resynced else { throw BenchmarkError("the controller resynced") }
        suite.check(
            "replica.catch-up-bytes", Double(caughtUp.bytes) / Double(resubscribe.bytes), target: 0.01, .atMost,
            of: "catch-up bytes received", over: "full resubscribe bytes received")
        suite.check(
            "replica.catch-up-time", caughtUp.total / resubscribe.seconds, target: nil, .atMost,
            of: "catch-up time (file, resumed subscribe, changed objects)", over: "full resubscribe time")
        suite.note("rows", .int(Int64(rows)))
        suite.note("freshSubscribeMs", .double(freshSeconds * 1000))
        suite.note("firstContentFromFileMs", .double(warmSeconds * 1000))
        suite.note("catchUpBytes", .int(caughtUp.bytes))
        suite.note("resubscribeBytes", .int(resubscribe.bytes))
        suite.note("catchUpObjectsFetched", .int(Int64(record.objectsFetched)))
        suite.note("catchUpHistoryTransactions", .int(Int64(record.historyTransactions)))
        suite.note("catchUpMs", .double(caughtUp.total * 1000))
        suite.note("resubscribeMs", .double(resubscribe.seconds * 1000))
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
