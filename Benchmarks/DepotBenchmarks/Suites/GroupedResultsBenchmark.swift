import DepotClient
import DepotProtocol
import DepotStore
import Foundation
import GRDBSQLite

/// Issue 24's benchmark: live grouped results over 1M rows in 1,000 groups.
///
/// In one run against one daemon: a one-row save that moves a row between
/// two groups, to the subscriber's `results/didChange` (p50); the save's
/// round trip with the grouped subscription live against the same save with
/// none; the speed-up over re-running the grouped query (`store/fetch`) after
/// each save; the grouped fetch through the daemon against the same SQL run
/// raw through the SQLite C API; and the daemon's memory per group (RSS growth
/// when the subscription's groups are built, over the number of groups).
struct GroupedResultsBenchmark: Benchmark {
    static let name = "grouped"
    static let summary =
        "1M rows / 1,000 groups: save → grouped didChange p50 (≤ 0.5 ms), save ≤ 1.3× unsubscribed, ≥ 500× re-running the query, grouped fetch ≥ 0.9× raw SQL, memory per group"

    static let entity = EntityDescription(
        name: "Tally",
        attributes: [
            AttributeDescription(name: "grp", type: .integer, indexed: true),
            AttributeDescription(name: "v", type: .integer),
        ])

    /// The grouped request: count and sum of `v` per `grp`, by group.
    static let request = FetchRequest(
        entity: "Tally", sort: [SortDescriptor(key: "grp")], groupBy: ["grp"],
        aggregates: [
            ExpressionDescription(name: "n", function: .count),
            ExpressionDescription(name: "total", function: .sum, key: "v"),
        ])

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let report = try await measure(
            suite, rows: quick ? 100_000 : 1_000_000, groups: 1_000, samples: quick ? 50 : 300)
        suite.noteReport(report)
        suite.check("grouped.didChange-p50-ms", report.didChangeP50Ms, target: 0.5, .atMost, of: "ms")
        suite.check(
            "grouped.save-ratio", report.liveSaveP50Ms / report.aloneSaveP50Ms, target: 1.3, .atMost,
            of: "save p50 with the grouped subscription", over: "none")
        suite.check(
            "grouped.speedup-p50", report.refetchP50Ms / report.didChangeP50Ms, target: 500,
            of: "grouped fetch p50", over: "didChange p50")
        suite.check(
            "grouped.fetch-vs-raw", report.rawFetchMs / report.depotFetchMs, target: 0.9, of: "raw SQL ms",
            over: "depotd grouped fetch ms")
        suite.check("grouped.rss-bytes-per-group", report.rssBytesPerGroup, target: nil, .atMost, of: "bytes")
    }

    struct Report: Codable {
        var rows: Int
        var groups: Int
        var samples: Int
        var didChangeP50Ms: Double
        var didChangeP99Ms: Double
        var aloneSaveP50Ms: Double
        var liveSaveP50Ms: Double
        var refetchP50Ms: Double
        var depotFetchMs: Double
        var rawFetchMs: Double
        var subscribeSeconds: Double
        var rssBytesPerGroup: Double
        var rssBytesPerRow: Double
        /// For reference: the save p50 with an object subscription (sorted by `grp`) over the same rows instead.
        var objectsSaveP50Ms: Double
    }

    private func measure(_ suite: SuiteRun, rows: Int, groups: Int, samples: Int) async throws -> Report {
        let daemon = try suite.startDaemon(.tcp)
        defer { daemon.stop() }
        let writer = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        let watcher = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        _ = try await writer.call(ModelDefine.self, .init(entities: [Self.entity]))
        try Self.load(rows, groups: groups, into: daemon)
        var generator = SystemRandomNumberGenerator()
        var moves = 0
        /// A save that moves a random row to another group with a new value: two groups change.
        func move() -> StoreSave.Parameters {
            moves += 1
            let row = Int.random(in: 1...rows, using: &generator)
            return .init(updated: [
                UpdatedObject(
                    id: "Tally/\(row)",
                    values: ["grp": .int(Int64((row + moves) % groups)), "v": .int(Int64(1_000 + moves))])
            ])
        }

        // The save alone, and the grouped query re-run (the baseline the subscription replaces).
        var alone: [Double] = []
        for _ in 0..<samples {
            let save = move()
            let start = ContinuousClock.now
            _ = try await writer.call(StoreSave.self, save)
            alone.append((ContinuousClock.now - start).milliseconds)
        }
        var fetches: [Double] = []
        for _ in 0..<5 {
            let start = ContinuousClock.now
            _ = try await writer.call(StoreFetch.self, Self.request, timeout: .seconds(600))
            fetches.append((ContinuousClock.now - start).milliseconds)
        }
        let raw = try rawFetch(daemon: daemon)

        let rssBefore = Int(daemon.memory()?.residentBytes ?? 0)
        let subscribeStart = ContinuousClock.now
        let subscription = try await watcher.call(
            ResultsSubscribe.self, .init(request: Self.request, include: .noObjects), timeout: .seconds(600))
        let subscribeSeconds = (ContinuousClock.now - subscribeStart).seconds
        let rssAfter = Int(daemon.memory()?.residentBytes ?? 0)
        guard subscription.count == groups else {
            throw BenchmarkError("the subscription holds \(subscription.count) groups, not \(groups)")
        }

        let arrivals = ArrivalLog(watcher, subscription: subscription.subscription)
        var didChange: [Double] = []
        var live: [Double] = []
        for sample in 0..<samples {
            let save = move()
            let start = ContinuousClock.now
            _ = try await writer.call(StoreSave.self, save)
            live.append((ContinuousClock.now - start).milliseconds)
            guard let arrived = await arrivals.wait(for: Int64(sample + 1)) else {
                throw BenchmarkError("no didChange for sample \(sample)")
            }
            didChange.append((arrived - start).milliseconds)
        }
        _ = try await watcher.call(ResultsUnsubscribe.self, .init(subscription: subscription.subscription))

        // The same saves with an object subscription over the same rows instead (a reference, no target).
        _ = try await watcher.call(
            ResultsSubscribe.self,
            .init(request: FetchRequest(entity: "Tally", sort: [SortDescriptor(key: "grp")]), include: .noObjects),
            timeout: .seconds(600))
        var objects: [Double] = []
        for _ in 0..<samples {
            let save = move()
            let start = ContinuousClock.now
            _ = try await writer.call(StoreSave.self, save)
            objects.append((ContinuousClock.now - start).milliseconds)
        }
        writer.abort()
        watcher.abort()
        let growth = Double(max(0, rssAfter - rssBefore))
        return Report(
            rows: rows, groups: groups, samples: samples, didChangeP50Ms: percentile(didChange, 0.5),
            didChangeP99Ms: percentile(didChange, 0.99), aloneSaveP50Ms: percentile(alone, 0.5),
            liveSaveP50Ms: percentile(live, 0.5), refetchP50Ms: percentile(fetches, 0.5),
            depotFetchMs: percentile(fetches, 0.5), rawFetchMs: percentile(raw, 0.5),
            subscribeSeconds: subscribeSeconds, rssBytesPerGroup: growth / Double(groups),
            rssBytesPerRow: growth / Double(rows), objectsSaveP50Ms: percentile(objects, 0.5))
    }

    /// Writes `count` rows straight into the daemon's database file, `grp` = row % `groups`
    /// (setup only: nothing here is measured; the daemon reads them like any committed rows).
    private static func load(_ count: Int, groups: Int, into daemon: DaemonProcess) throws {
        let insert = #"INSERT INTO "e_Tally" (id, _version, "grp", "v") VALUES (?, 1, ?, ?)"#
        try daemon.insertDirectly(count, with: insert) { statement, index in
            sqlite3_bind_int64(statement, 1, Int64(index))
            sqlite3_bind_int64(statement, 2, Int64(index % groups))
            sqlite3_bind_int64(statement, 3, Int64(index % 97))
        }
    }

    /// The grouped fetch's own SQL (``GroupedFetchPlan``) run five times through the SQLite C API, every column read.
    private func rawFetch(daemon: DaemonProcess) throws -> [Double] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-bench-grouped-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("g.sqlite").path)
        _ = try store.defineModel([Self.entity])
        let plan = try GroupedFetchPlan(Self.request, scope: .unrestricted, schema: store.schema)
        var db: OpaquePointer?
        let path = daemon.dataDirectory.appendingPathComponent("depot.sqlite").path
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { throw BenchmarkError("open") }
        defer { sqlite3_close(db) }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, plan.rowsSQL, -1, &statement, nil) == SQLITE_OK else {
            throw BenchmarkError(String(cString: sqlite3_errmsg(db)))
        }
        defer { sqlite3_finalize(statement) }
        var times: [Double] = []
        for _ in 0..<5 {
            let begin = ContinuousClock.now
            while sqlite3_step(statement) == SQLITE_ROW {
                for column in 0..<sqlite3_column_count(statement) { _ = sqlite3_column_text(statement, column) }
            }
            sqlite3_reset(statement)
            times.append((ContinuousClock.now - begin).milliseconds)
        }
        return times
    }
}
