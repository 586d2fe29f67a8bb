import DepotClient
import DepotPostgres
import DepotProtocol
import Foundation
import GRDBSQLite
import Logging
import PostgresNIO

/// Issue 26's joining figure on its own: a store of 1M Items (50,000 with `--quick`) loaded through
/// a daemon on a throwaway PostgreSQL (fsync on), then a new daemon on an empty data directory
/// joining from the snapshot, timed to its first subscribe answering with every object
/// (``ClusterJoin``), against a raw `COPY … TO STDOUT` of the same tables read by `psql` plus a raw
/// SQLite bulk load of them. The `cluster` suite measures the same on its own loaded store.
struct ClusterJoinBenchmark: Benchmark {
    static let name = "cluster-join"
    static let summary =
        "a new daemon joining a 1M-object cluster from the snapshot, start to first subscribe, vs raw COPY … TO STDOUT + raw SQLite bulk load (≥ 0.5×)"

    func run(_ suite: SuiteRun) async throws {
        let rows = suite.options.quick ? 50_000 : 1_000_000
        let server = try ThrowawayPostgres(directory: suite.directory.appendingPathComponent("postgres"))
        defer { server.stop() }
        let store = "postgresql://\(server.url.username)@\(server.url.host):\(server.url.port)/\(server.url.database)"
        let arguments = ["--store", store + "?schema=bench_join"]
        let first = try suite.startDaemon(.tcp, label: "depotd-a", extraArguments: arguments)
        defer { first.stop() }
        let writer = try await DepotConnection.connect(to: first.endpoint, timeout: .seconds(600))
        _ = try await writer.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
        let loadStart = ContinuousClock.now
        try await ItemSeed.save(rows, through: writer)
        suite.note("loadSeconds", .double((ContinuousClock.now - loadStart).seconds))
        writer.abort()
        first.stop()
        var url = server.url
        url.schema = "bench_join"
        _ = try await ClusterJoin.measure(
            suite, server: server, url: url, arguments: arguments,
            replica: first.dataDirectory.appendingPathComponent("depot.sqlite"), rows: rows)
    }
}

/// A new daemon joining a cluster from its snapshot, against the raw floor of the same work.
enum ClusterJoin {
    /// Times a daemon started on an empty data directory (`arguments` name the cluster) until a
    /// subscription on it answers with all `rows` Items, then the raw baseline
    /// (``rawCopyAndLoad(server:url:schemaOf:into:)``) of the same tables into a new SQLite file
    /// laid out as `replica` (a stopped daemon's file); records both, and their ratio against the
    /// issue's target (≥ 0.5: the join takes at most twice the raw floor). Returns the seconds.
    static func measure(
        _ suite: SuiteRun, server: ThrowawayPostgres, url: PostgresURL, arguments: [String], replica: URL, rows: Int
    ) async throws -> (join: Double, raw: Double) {
        let join = try await secondsToServe(suite, label: "depotd-joins", arguments: arguments, rows: rows)
        let raw = try await rawCopyAndLoad(
            server: server, url: url, schemaOf: replica, into: suite.directory.appendingPathComponent("raw-join.sqlite")
        )
        suite.note(
            "join",
            [
                "rows": .int(Int64(rows)), "joinToFirstSubscribeSeconds": .double(join),
                "rawCopyPlusSQLiteLoadSeconds": .double(raw.seconds), "rawRows": .int(Int64(raw.rows)),
                "rawCopySecondsAlone": .double(raw.copySeconds),
            ])
        suite.check(
            "cluster.join-vs-raw-copy-load", raw.seconds / join, target: 0.5,
            of: "raw COPY TO STDOUT + SQLite bulk load (s)", over: "join to first subscribe (s)")
        return (join, raw.seconds)
    }

    /// Seconds from starting a daemon on an empty data directory until a subscription on it
    /// answers with all `rows` objects.
    static func secondsToServe(_ suite: SuiteRun, label: String, arguments: [String], rows: Int) async throws
        -> Double
    {
        let start = ContinuousClock.now
        let daemon = try suite.startDaemon(.tcp, label: label, extraArguments: arguments)
        defer { daemon.stop() }
        let client = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        defer { client.abort() }
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        while true {
            let subscribed = try? await client.call(
                ResultsSubscribe.self, .init(request: request, include: .noObjects), timeout: .seconds(600))
            if let subscribed, subscribed.count >= rows { return (ContinuousClock.now - start).seconds }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The raw floor of a join: every object table of `url`'s schema read with `psql` running
    /// `COPY … TO STDOUT` (text format, streamed through a pipe) and inserted as it arrives into a
    /// new SQLite file at `path` through the C API — the tables of `replica`, one prepared INSERT
    /// per table, one transaction, the indexes built after the rows (as the daemon does). Returns
    /// the seconds from the first COPY to the commit, the rows, and the seconds of the COPYs alone
    /// (each table copied again into a discarding pipe).
    static func rawCopyAndLoad(server: ThrowawayPostgres, url: PostgresURL, schemaOf replica: URL, into path: URL)
        async throws -> (seconds: Double, rows: Int, copySeconds: Double)
    {
        try? FileManager.default.removeItem(at: path)
        let logger = Logger(label: "depot.bench.join")
        let admin = try await PostgresConnection.connect(configuration: url.configuration, id: 3, logger: logger)
        defer { Task { try? await admin.close() } }
        var tables: [(name: String, types: [String])] = []
        let names = try await admin.query(
            """
            SELECT tablename FROM pg_tables
            WHERE schemaname = \(url.schema) AND (tablename LIKE 'e\\_%' OR tablename LIKE 'j\\_%') ORDER BY tablename
            """, logger: logger
        ).collect().map { try $0.decode(String.self) }
        for name in names {
            let types = try await admin.query(
                """
                SELECT data_type FROM information_schema.columns
                WHERE table_schema = \(url.schema) AND table_name = \(name) ORDER BY ordinal_position
                """, logger: logger
            ).collect().map { try $0.decode(String.self) }
            tables.append((name, types))
        }

        let (createTables, createIndexes) = try schema(of: replica)
        let sqlite = try RawSQLite(path: path.path)
        try sqlite.execute(createTables.joined(separator: ";\n"))
        let start = ContinuousClock.now
        try sqlite.execute("BEGIN")
        var rows = 0
        for table in tables {
            let insert = try sqlite.prepare(
                "INSERT INTO \"\(table.name)\" VALUES (\(Array(repeating: "?", count: table.types.count).joined(separator: ", ")))"
            )
            rows += try copy(url: url, table: table.name) { line in
                try bind(line, types: table.types, to: insert)
                try insert.run()
            }
        }
        try sqlite.execute(createIndexes.joined(separator: ";\n"))
        try sqlite.execute("COMMIT")
        let seconds = (ContinuousClock.now - start).seconds

        let copyStart = ContinuousClock.now
        for table in tables { _ = try copy(url: url, table: table.name) { _ in } }
        return (seconds, rows, (ContinuousClock.now - copyStart).seconds)
    }

    /// The `CREATE TABLE` and `CREATE INDEX` statements of the object tables of the SQLite file at `replica`.
    private static func schema(of replica: URL) throws -> (tables: [String], indexes: [String]) {
        let source = try RawSQLite(path: replica.path)
        let select = try source.prepare(
            "SELECT type, sql FROM sqlite_master WHERE (tbl_name GLOB 'e_*' OR tbl_name GLOB 'j_*') AND sql IS NOT NULL AND type IN ('table', 'index')"
        )
        var tables: [String] = []
        var indexes: [String] = []
        try select.run { row in
            let sql = String(cString: sqlite3_column_text(row, 1))
            if String(cString: sqlite3_column_text(row, 0)) == "table" {
                tables.append(sql)
            } else {
                indexes.append(sql)
            }
        }
        guard !tables.isEmpty else { throw BenchmarkError("no object tables in \(replica.path)") }
        return (tables, indexes)
    }

    /// Runs `psql` with `COPY "schema"."table" TO STDOUT` and hands every line (without its
    /// newline) to `line` as it arrives through the pipe; returns the number of lines.
    private static func copy(url: PostgresURL, table: String, _ line: (ArraySlice<UInt8>) throws -> Void) throws
        -> Int
    {
        let process = Process()
        process.executableURL = try psql()
        process.arguments = [
            "-X", "-q", "-h", url.host, "-p", String(url.port), "-U", url.username, "-d", url.database, "-c",
            "COPY \"\(url.schema)\".\"\(table)\" TO STDOUT",
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        var pending: [UInt8] = []
        var count = 0
        let reader = pipe.fileHandleForReading
        while true {
            let chunk = reader.readData(ofLength: 1 << 20)
            if chunk.isEmpty { break }
            pending.append(contentsOf: chunk)
            var start = pending.startIndex
            while let end = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                try line(pending[start..<end])
                count += 1
                start = end + 1
            }
            pending.removeSubrange(..<start)
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BenchmarkError("psql COPY of \(table) exited with \(process.terminationStatus)")
        }
        return count
    }

    /// Binds one line of `COPY` text output (tab-separated, `\N` for null, backslash escapes) to
    /// `statement`, each field as the store stores a value of its PostgreSQL `types`.
    private static func bind(_ line: ArraySlice<UInt8>, types: [String], to statement: RawSQLite.Statement) throws {
        var index: Int32 = 1
        for field in line.split(separator: UInt8(ascii: "\t"), omittingEmptySubsequences: false) {
            defer { index += 1 }
            guard Int(index) <= types.count else { throw BenchmarkError("a COPY line has too many fields") }
            if field.elementsEqual("\\N".utf8) {
                sqlite3_bind_null(statement.handle, index)
                continue
            }
            let text = unescaped(field)
            switch types[Int(index) - 1] {
            case "bigint", "integer", "smallint": statement.bind(index, Int64(text) ?? 0)
            case "double precision", "real": statement.bind(index, Double(text) ?? 0)
            case "boolean": statement.bind(index, Int64(text == "t" ? 1 : 0))
            case "bytea":
                var bytes: [UInt8] = []
                var digits = text.utf8.dropFirst(2).makeIterator()
                while let high = digits.next(), let low = digits.next() {
                    bytes.append(UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) ?? 0)
                }
                let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
                sqlite3_bind_blob(statement.handle, index, bytes, Int32(bytes.count), transient)
            default: statement.bind(index, text)
            }
        }
    }

    /// A field of `COPY` text output with its backslash escapes undone.
    private static func unescaped(_ field: ArraySlice<UInt8>) -> String {
        guard field.contains(UInt8(ascii: "\\")) else { return String(decoding: field, as: UTF8.self) }
        var bytes: [UInt8] = []
        var escaped = false
        for byte in field {
            if escaped {
                switch byte {
                case UInt8(ascii: "t"): bytes.append(9)
                case UInt8(ascii: "n"): bytes.append(10)
                case UInt8(ascii: "r"): bytes.append(13)
                default: bytes.append(byte)
                }
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The newest `psql` of Debian's PostgreSQL packages, or the one on the `PATH`.
    private static func psql() throws -> URL {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let path = "/usr/lib/postgresql/\(version)/bin/psql"
            if FileManager.default.isExecutableFile(atPath: path) { return URL(fileURLWithPath: path) }
        }
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/psql") {
            return URL(fileURLWithPath: "/usr/bin/psql")
        }
        throw BenchmarkError("no psql: install Debian's postgresql package (make setup-system)")
    }
}
