import DepotClient
import DepotProtocol
import Foundation
import GRDBSQLite

/// Issue 6's benchmark: `store/batchInsert` of N Items (1M, 100k with `--quick`)
/// over RPC against raw prepared inserts in one transaction through the C API,
/// and a streamed (`partialResultToken`) fetch of them sorted by createdAt
/// against a raw `sqlite3_step` scan of the same query (the objects decoded into
/// a `Decodable` type of the caller's, as a user of the Swift client gets them;
/// and, for information, as `DepotObject`s); with the daemon's peak RSS during each.
struct BatchInsertBenchmark: Benchmark {
    static let name = "batch"
    static let summary =
        "batchInsert 1M vs raw prepared inserts (≥ 0.5×), streamed typed fetch vs raw scan (≥ 0.5×), peak RSS < 200 MB"

    func run(_ suite: SuiteRun) async throws {
        let report = try await measure(suite, rows: suite.options.quick ? 100_000 : 1_000_000)
        suite.noteReport(report)
        suite.check(
            "batch.insert", report.insertRatio, target: 0.5, of: "batchInsert rows/s", over: "raw inserts rows/s")
        suite.check(
            "batch.streamed-fetch", report.fetchRatio, target: 0.5, of: "streamed fetch rows/s", over: "raw scan rows/s"
        )
        suite.check(
            "batch.streamed-fetch-depotobjects", report.objectsFetchRatio, target: nil,
            of: "streamed fetch as DepotObjects rows/s", over: "raw scan rows/s")
        suite.check(
            "batch.peak-rss-mb", max(report.peakRSSAfterInsertMB, report.peakRSSAfterFetchMB), target: 200, .atMost,
            of: "MB")
    }

    struct Report: Codable {
        var rows: Int
        var batchInsertSeconds: Double
        var rawInsertSeconds: Double
        var insertRatio: Double
        var peakRSSAfterInsertMB: Double
        var streamedFetchSeconds: Double
        var rawScanSeconds: Double
        var fetchRatio: Double
        var peakRSSAfterFetchMB: Double
        /// The same streamed fetch as ``DepotObject``s.
        var streamedObjectsSeconds: Double
        var objectsFetchRatio: Double
    }

    private func measure(_ suite: SuiteRun, rows: Int) async throws -> Report {
        // One request carries every object (~80 MB for 1M): above the default 16 MiB inbound limit.
        let daemon = try suite.startDaemon(.tcp, extraArguments: ["--max-message-size", String(512 << 20)])
        defer { daemon.stop() }
        let client = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(900))
        _ = try await client.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
        // The objects are built before timing: the measure is the RPC and the daemon, one request
        // and one transaction, as the issue asks.
        let all = (0..<rows).map { index -> [String: JSONValue] in
            [
                "name": .string("item \(index)"), "createdAt": .string(ISO8601.string(from: ItemSeed.createdAt(index))),
                "done": false,
            ]
        }
        let start = ContinuousClock.now
        _ = try await client.call(BatchInsert.self, .init(entity: "Item", objects: all), timeout: .seconds(900))
        let insertSeconds = (ContinuousClock.now - start).seconds
        let peakAfterInsert = Double(daemon.memory()?.peakResidentBytes ?? 0) / 1_048_576
        let raw = try rawInsert(rows: rows)

        // Streamed fetch, as a user of the Swift client gets it: partial results in chunks of
        // 5,000, every object decoded into the caller's own Decodable type and counted.
        let fetchStart = ContinuousClock.now
        let fetched = try await streamedFetch(client, as: StreamedItem.self)
        let fetchSeconds = (ContinuousClock.now - fetchStart).seconds
        guard fetched == rows else {
            throw BenchmarkError("the streamed fetch delivered \(fetched) of \(rows) objects")
        }
        let peakAfterFetch = Double(daemon.memory()?.peakResidentBytes ?? 0) / 1_048_576
        // The same as DepotObjects (a dictionary of values per object).
        let objectsStart = ContinuousClock.now
        let fetchedObjects = try await streamedFetch(client, as: DepotObject.self)
        let objectsSeconds = (ContinuousClock.now - objectsStart).seconds
        guard fetchedObjects == rows else {
            throw BenchmarkError("the streamed fetch delivered \(fetchedObjects) of \(rows) DepotObjects")
        }
        client.abort()
        let scan = try rawScan(path: daemon.dataDirectory.appendingPathComponent("depot.sqlite").path)
        return Report(
            rows: rows, batchInsertSeconds: insertSeconds, rawInsertSeconds: raw, insertRatio: raw / insertSeconds,
            peakRSSAfterInsertMB: peakAfterInsert, streamedFetchSeconds: fetchSeconds, rawScanSeconds: scan,
            fetchRatio: scan / fetchSeconds, peakRSSAfterFetchMB: peakAfterFetch,
            streamedObjectsSeconds: objectsSeconds, objectsFetchRatio: scan / objectsSeconds)
    }

    /// The sorted fetch of every Item through ``DepotConnection/execute(_:)``, the objects taken
    /// as they arrive (`objects`) as `Object`; returns how many came.
    private func streamedFetch<Object: Decodable & Sendable>(_ client: DepotConnection, as type: Object.Type)
        async throws -> Int
    {
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")], batchSize: 5000)
        let running = try await client.execute(AsynchronousFetchRequest(fetchRequest: request, as: Object.self))
        var count = 0
        for try await _ in running.objects { count += 1 }
        return count
    }

    /// Prepared inserts of the same rows in one transaction, same pragmas, through the C API.
    private func rawInsert(rows: Int) throws -> Double {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-bench-rawins-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var db: OpaquePointer?
        sqlite3_open(directory.appendingPathComponent("raw.sqlite").path, &db)
        defer { sqlite3_close(db) }
        sqlite3_exec(
            db,
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; CREATE TABLE e_Item (id INTEGER PRIMARY KEY AUTOINCREMENT, _version INTEGER NOT NULL DEFAULT 1, name, createdAt, done); CREATE INDEX i ON e_Item (createdAt)",
            nil, nil, nil)
        var statement: OpaquePointer?
        sqlite3_prepare_v2(
            db, "INSERT INTO e_Item (_version, name, createdAt, done) VALUES (1, ?, ?, ?)", -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        let start = ContinuousClock.now
        sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil)
        for index in 0..<rows {
            sqlite3_bind_text(statement, 1, "item \(index)", -1, transient)
            sqlite3_bind_double(statement, 2, ItemSeed.createdAt(index))
            sqlite3_bind_int64(statement, 3, 0)
            sqlite3_step(statement)
            sqlite3_reset(statement)
        }
        sqlite3_exec(db, "COMMIT", nil, nil, nil)
        return (ContinuousClock.now - start).seconds
    }

    /// The same sorted query scanned through the C API, reading every column.
    private func rawScan(path: String) throws -> Double {
        var db: OpaquePointer?
        sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil)
        defer { sqlite3_close(db) }
        var statement: OpaquePointer?
        sqlite3_prepare_v2(
            db,
            #"SELECT t0.id, t0._version, t0."name", t0."createdAt", t0."done" FROM "e_Item" AS t0 WHERE 1 ORDER BY t0."createdAt" ASC, t0.id ASC"#,
            -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        let start = ContinuousClock.now
        while sqlite3_step(statement) == SQLITE_ROW {
            for column in 0..<5 { _ = sqlite3_column_text(statement, Int32(column)) }
        }
        return (ContinuousClock.now - start).seconds
    }
}

/// One streamed Item as a user's own type would take it.
private struct StreamedItem: Decodable, Sendable {
    var id: String
    var name: String
    var createdAt: Date
    var done: Bool
}
