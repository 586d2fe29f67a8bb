import DepotClient
import DepotProtocol
import DepotStore
import Foundation
import GRDBSQLite

/// Issue 4's benchmark: `store/fetch` with `name CONTAINS[cd] $q` over N Items
/// (1M, 100k with `--quick`) through depotd against the very SQL it compiles to,
/// run raw through the C API (with the same fold function); and parse+compile
/// time of a 10-clause predicate.
///
/// Issue 28 adds the `folded` attribute option: the same CONTAINS[cd] and a
/// BEGINSWITH[cd] (which the shadow column's index can serve) without the option,
/// then after a `model/define` that adds it (timed: it rewrites the table), each
/// through depotd and raw; the speed-ups compare depotd without and with it.
struct PredicateFetchBenchmark: Benchmark {
    static let name = "predicate-fetch"
    static let summary = "CONTAINS[cd] fetch over 1M Items: raw SQL time / depotd time (target ≥ 0.8); parse+compile µs"

    func run(_ suite: SuiteRun) async throws {
        let report = try await measure(suite, rows: suite.options.quick ? 100_000 : 1_000_000)
        suite.noteReport(report)
        suite.check("predicate.contains-cd", report.ratio, target: 0.8, of: "raw SQL ms", over: "depotd fetch ms")
        suite.check(
            "predicate.parse-compile-us", report.parseCompileMicroseconds, target: nil, .atMost, of: "µs for 10 clauses"
        )
        let folded = report.folded
        suite.check(
            "predicate.contains-cd-folded", folded.contains.rawMs / folded.contains.depotMs, target: 0.8,
            of: "raw SQL ms (shadow column)", over: "depotd fetch ms (folded)")
        suite.check(
            "predicate.contains-cd-folded-speedup", report.depotFetchMs / folded.contains.depotMs, target: nil,
            of: "depotd ms without folded", over: "with folded")
        suite.check(
            "predicate.beginswith-cd-folded", folded.beginsWith.rawMs / folded.beginsWith.depotMs, target: nil,
            of: "raw SQL ms (shadow column, index)", over: "depotd fetch ms (folded)")
        suite.check(
            "predicate.beginswith-cd-folded-speedup", folded.plainBeginsWith.depotMs / folded.beginsWith.depotMs,
            target: nil, of: "depotd ms without folded", over: "with folded")
        suite.check(
            "predicate.folded-batch-insert-cost", folded.foldedBatchInsertMs / folded.batchInsertMs, target: nil,
            .atMost, of: "batchInsert ms with folded", over: "without")
        suite.check(
            "predicate.fold-migration-ms", folded.migrationMs, target: nil, .atMost, of: "ms to add folded to every row"
        )
    }

    struct Report: Codable {
        var rows: Int
        var parseCompileMicroseconds: Double
        var depotFetchMs: Double
        var rawFetchMs: Double
        var ratio: Double
        var matches: Int
        var folded: FoldedReport
    }

    /// One fetch measured through depotd and raw.
    struct Timing: Codable {
        var depotMs: Double
        var rawMs: Double
        var matches: Int
    }

    /// The `folded` option's figures (issue 28).
    struct FoldedReport: Codable {
        /// BEGINSWITH[cd] without the option (every row folded, no index).
        var plainBeginsWith: Timing
        /// `model/define` adding the option to the loaded rows.
        var migrationMs: Double
        /// A 20,000-row `store/batchInsert` without the option, and the same with it (the write cost).
        var batchInsertMs: Double
        var foldedBatchInsertMs: Double
        /// CONTAINS[cd] with the option (the shadow column scanned).
        var contains: Timing
        /// BEGINSWITH[cd] with the option (a range of the shadow column's index).
        var beginsWith: Timing
    }

    static let containsRequest = FetchRequest(
        entity: "Item", predicate: "name CONTAINS[cd] $q", arguments: ["q": "ITEM 99999"],
        sort: [SortDescriptor(key: "createdAt")])
    static let beginsWithRequest = FetchRequest(
        entity: "Item", predicate: "name BEGINSWITH[cd] $q", arguments: ["q": "ITEM 99999"],
        sort: [SortDescriptor(key: "createdAt")])

    static let tenClauses =
        "name BEGINSWITH[c] 'item' AND createdAt > $from AND createdAt < $to AND done == NO AND (name CONTAINS '1' OR name CONTAINS '2') AND NOT name ENDSWITH '9' AND name != 'x' AND name LIKE[cd] '*7*' AND createdAt BETWEEN {$from, $to} AND name MATCHES 'item [0-9]+'"

    private func measure(_ suite: SuiteRun, rows: Int) async throws -> Report {
        // Parse + compile, in process.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-bench-pred-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("p.sqlite").path)
        _ = try store.defineModel([ItemSeed.entity])
        let schema = store.schema
        let entity = schema.entity(named: "Item")!
        let arguments: JSONValue = ["from": "2023-11-14T00:00:00Z", "to": "2024-01-01T00:00:00Z"]
        let iterations = 5000
        let start = ContinuousClock.now
        for _ in 0..<iterations {
            _ = try PredicateCompilation.whereClause(
                predicate: Self.tenClauses, arguments: arguments, entity: entity, schema: schema)
        }
        let parseCompile = (ContinuousClock.now - start).seconds / Double(iterations) * 1e6

        // The fetch, through the daemon and raw.
        let daemon = try suite.startDaemon(.tcp)
        defer { daemon.stop() }
        let client = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        try await ItemSeed.load(rows, into: daemon, connection: client)
        let path = daemon.dataDirectory.appendingPathComponent("depot.sqlite").path
        let plain = try await timing(Self.containsRequest, client: client, schema: schema, path: path)
        let plainBeginsWith = try await timing(Self.beginsWithRequest, client: client, schema: schema, path: path)
        let batchInsertMs = try await fillerBatch(0, client: client)

        // The same fetches with `name` folded.
        var foldedEntity = ItemSeed.entity
        foldedEntity.attributes[0].folded = true
        let begin = ContinuousClock.now
        _ = try await client.call(ModelDefine.self, .init(entities: [foldedEntity]), timeout: .seconds(600))
        let migrationMs = (ContinuousClock.now - begin).milliseconds
        _ = try store.defineModel([foldedEntity])
        let foldedSchema = store.schema
        let contains = try await timing(Self.containsRequest, client: client, schema: foldedSchema, path: path)
        let beginsWith = try await timing(Self.beginsWithRequest, client: client, schema: foldedSchema, path: path)
        let foldedBatchInsertMs = try await fillerBatch(1, client: client)
        client.abort()
        guard contains.matches == plain.matches, beginsWith.matches == plainBeginsWith.matches else {
            throw BenchmarkError("the folded fetches matched other rows than the plain ones")
        }
        return Report(
            rows: rows, parseCompileMicroseconds: parseCompile, depotFetchMs: plain.depotMs, rawFetchMs: plain.rawMs,
            ratio: plain.rawMs / plain.depotMs, matches: plain.matches,
            folded: FoldedReport(
                plainBeginsWith: plainBeginsWith, migrationMs: migrationMs, batchInsertMs: batchInsertMs,
                foldedBatchInsertMs: foldedBatchInsertMs, contains: contains, beginsWith: beginsWith))
    }

    /// Inserts 20,000 Items that no request here matches (`filler <round>-<i>`) in one
    /// `store/batchInsert`; its time in ms.
    private func fillerBatch(_ round: Int, client: DepotConnection) async throws -> Double {
        let objects: [[String: JSONValue]] = (0..<20_000).map { index in
            [
                "name": .string("filler \(round)-\(index)"),
                "createdAt": .string(ISO8601Text.string(seconds: ItemSeed.createdAt(index))),
            ]
        }
        let begin = ContinuousClock.now
        _ = try await client.call(BatchInsert.self, .init(entity: "Item", objects: objects), timeout: .seconds(600))
        return (ContinuousClock.now - begin).milliseconds
    }

    /// `request` five times through depotd and five times raw (the SQL `schema` compiles it to); medians.
    private func timing(_ request: FetchRequest, client: DepotConnection, schema: Schema, path: String) async throws
        -> Timing
    {
        var depotTimes: [Double] = []
        var matches = 0
        for _ in 0..<5 {
            let begin = ContinuousClock.now
            matches = try await client.call(StoreFetch.self, request, timeout: .seconds(600)).objects?.count ?? 0
            depotTimes.append((ContinuousClock.now - begin).milliseconds)
        }
        let plan = try FetchPlan(request, scope: .unrestricted, schema: schema)
        let rawTimes = try rawScan(
            sql: plan.objectsSQL, arguments: plan.condition.arguments.map { String.fromDatabaseValue($0) ?? "" },
            path: path)
        return Timing(depotMs: percentile(depotTimes, 0.5), rawMs: percentile(rawTimes, 0.5), matches: matches)
    }

    /// Runs `sql` through the C API (with the SQL functions it calls), stepping every row and reading every column.
    private func rawScan(sql: String, arguments: [String], path: String) throws -> [Double] {
        var db: OpaquePointer?
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { throw BenchmarkError("open") }
        defer { sqlite3_close(db) }
        sqlite3_create_function_v2(
            db, "depot_fold", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, _, values in
                guard let values, let text = sqlite3_value_text(values[0]) else { return sqlite3_result_null(context) }
                let folded = PredicateText.fold(String(cString: text), Int(sqlite3_value_int64(values[1])))
                sqlite3_result_text(context, folded, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            }, nil, nil, nil)
        // BEGINSWITH's pattern escaping.
        sqlite3_create_function_v2(
            db, "depot_glob_literal", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
            { context, _, values in
                guard let values, let text = sqlite3_value_text(values[0]) else { return sqlite3_result_null(context) }
                let escaped = PredicateText.globLiteral(String(cString: text))
                sqlite3_result_text(context, escaped, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            }, nil, nil, nil)
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else {
            throw BenchmarkError(String(cString: sqlite3_errmsg(db)))
        }
        defer { sqlite3_finalize(statement) }
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        var times: [Double] = []
        for _ in 0..<5 {
            let begin = ContinuousClock.now
            for (index, argument) in arguments.enumerated() {
                sqlite3_bind_text(statement, Int32(index + 1), argument, -1, transient)
            }
            while sqlite3_step(statement) == SQLITE_ROW {
                for column in 0..<sqlite3_column_count(statement) { _ = sqlite3_column_text(statement, column) }
            }
            sqlite3_reset(statement)
            times.append((ContinuousClock.now - begin).milliseconds)
        }
        return times
    }
}
