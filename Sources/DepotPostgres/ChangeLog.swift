import DepotProtocol
import Foundation
import Logging
import PostgresNIO

/// One committed transaction of the cluster, as the change log holds it.
public struct ChangeLogEntry: Sendable, Hashable {
    /// The transaction's number: the cluster's commit order, with no holes (docs/cluster.md).
    public var transaction: Int64
    /// Who committed it (the daemon's name).
    public var author: String
    /// What it changed, as its author encoded it.
    public var changes: JSONValue
    /// When it was numbered, just before its commit.
    public var committedAt: Date

    /// Creates an entry (the log creates them; tests compare against them).
    public init(transaction: Int64, author: String, changes: JSONValue, committedAt: Date) {
        self.transaction = transaction
        self.author = author
        self.changes = changes
        self.committedAt = committedAt
    }
}

/// The cluster change log of DESIGN section 11: one row per committed write transaction, numbered in
/// commit order with no hole ever filled later, in the tables of one PostgreSQL schema.
///
/// Writers call ``append(changes:author:on:logger:)`` last in their own transaction; tailers read
/// ``entries(after:limit:on:logger:)`` and keep their position with ``savePosition(_:of:on:logger:)``
/// (``ChangeLogTailer`` does both). docs/cluster.md argues why the numbering is safe.
public struct ChangeLog: Sendable {
    /// The schema that holds the log's tables.
    public let schema: String
    /// Whether ``append(changes:author:on:logger:)`` sends a NOTIFY hint on ``channel``.
    public var notifies: Bool

    /// The NOTIFY channel whose payload is a new transaction number: a wake-up hint, never the data.
    public var channel: String { "\(schema)_changes" }

    /// The transaction-scoped advisory lock that orders numbering, one key per schema.
    let lockKey: Int64

    /// The value the lock statement sets, transaction-locally, for the insert to check.
    private var lockMark: String { "\(schema):\(lockKey)" }
    /// The log table's qualified name.
    var log: String { "\"\(schema)\".change_log" }
    private var positions: String { "\"\(schema)\".change_log_positions" }

    /// A log in `schema` (a lowercase SQL identifier), notifying tailers unless `notifies` is false.
    public init(schema: String = "depot", notifies: Bool = true) throws(ChangeLogError) {
        guard Self.isPlainIdentifier(schema) else { throw .invalidSchemaName(schema) }
        self.schema = schema
        self.notifies = notifies
        // FNV-1a: stable across processes and versions, unlike Hasher.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in "depot.change_log:\(schema)".utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        self.lockKey = Int64(bitPattern: hash)
    }

    static func isPlainIdentifier(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63,
            !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first)
        else { return false }
        return name.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: "_")
        }
    }

    /// Creates the schema and the log's tables if missing. Daemons starting together may all call it.
    public func createSchema(on connection: PostgresConnection, logger: Logger) async throws(ChangeLogError) {
        try await mappingErrors {
            try await connection.withTransaction(logger: logger) { connection in
                // Concurrent CREATE ... IF NOT EXISTS can still collide on the catalog's unique index.
                try await connection.query("SELECT 1 FROM pg_advisory_xact_lock(\(lockKey))", logger: logger)
                try await connection.query("CREATE SCHEMA IF NOT EXISTS \(unescaped: "\"\(schema)\"")", logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS \(unescaped: log) (
                                "transaction" bigint PRIMARY KEY,
                                author text NOT NULL,
                                changes jsonb NOT NULL,
                                committed_at timestamptz NOT NULL DEFAULT clock_timestamp()
                    )
                    """, logger: logger)
                // The SQLite changeset that brings a replica's rows to the entry's state (docs/cluster.md).
                try await connection.query(
                    "ALTER TABLE \(unescaped: log) ADD COLUMN IF NOT EXISTS changeset bytea", logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS \(unescaped: positions) (
                                tailer text PRIMARY KEY,
                                last bigint NOT NULL,
                                updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
                    )
                    """, logger: logger)
            }
        }
    }

    /// Appends one entry inside the caller's open READ COMMITTED transaction and returns its number.
    ///
    /// Call it last, just before COMMIT: it takes the log's transaction-scoped advisory lock, which
    /// serializes every appending transaction of the cluster until it commits or rolls back. The
    /// entry (and its NOTIFY hint) becomes visible at COMMIT; on ROLLBACK its number is never seen
    /// and the next transaction takes it.
    @discardableResult
    public func append(
        changes: JSONValue, author: String, on connection: PostgresConnection, logger: Logger
    ) async throws(ChangeLogError) -> Int64 {
        // The lock statement leaves a transaction-local mark that the insert requires: outside BEGIN,
        // each statement is a transaction of its own, so the lock and the mark would be gone by then.
        let isolation = try await mappingErrors {
            let rows = try await connection.query(
                """
                SELECT current_setting('transaction_isolation'), set_config('depot.change_log_lock', \(lockMark), true)
                FROM pg_advisory_xact_lock(\(lockKey))
                """, logger: logger)
            guard let row = try await rows.collect().first else { return String?.none }
            let (isolation, _) = try row.decode((String, String).self)
            return isolation
        }
        guard let isolation else { throw .database("the advisory lock returned no row") }
        guard isolation == "read committed" else { throw .unsupportedIsolation(isolation) }
        let json = String(decoding: JSONWriter.encode(changes), as: UTF8.self)
        let notifyChannel: String? = notifies ? channel : nil
        // A new statement, so a new READ COMMITTED snapshot: it sees every entry committed before the lock.
        let number = try await mappingErrors {
            let rows = try await connection.query(
                """
                WITH entry AS (
                    INSERT INTO \(unescaped: log) ("transaction", author, changes)
                    SELECT coalesce(max("transaction"), 0) + 1, \(author), \(json)::jsonb FROM \(unescaped: log)
                    HAVING current_setting('depot.change_log_lock', true) = \(lockMark)
                    RETURNING "transaction"
                )
                SELECT "transaction", CASE WHEN \(notifyChannel)::text IS NULL THEN ''
                    ELSE pg_notify(\(notifyChannel), "transaction"::text)::text END
                FROM entry
                """, logger: logger)
            guard let row = try await rows.collect().first else { return Int64?.none }
            let (number, _) = try row.decode((Int64, String).self)
            return number
        }
        guard let number else { throw .notInTransaction }
        return number
    }

    /// Up to `limit` committed entries numbered above `last`, in order.
    public func entries(
        after last: Int64, limit: Int, on connection: PostgresConnection, logger: Logger
    ) async throws(ChangeLogError) -> [ChangeLogEntry] {
        let rows = try await mappingErrors {
            let rows = try await connection.query(
                """
                SELECT "transaction", author, changes::text, committed_at FROM \(unescaped: log)
                WHERE "transaction" > \(last) ORDER BY "transaction" LIMIT \(Int64(limit))
                """, logger: logger)
            var decoded: [(Int64, String, String, Date)] = []
            for try await row in rows.decode((Int64, String, String, Date).self) { decoded.append(row) }
            return decoded
        }
        var entries: [ChangeLogEntry] = []
        entries.reserveCapacity(rows.count)
        for (transaction, author, json, committedAt) in rows {
            let changes: JSONValue
            do { changes = try JSONParser.parse(json) } catch {
                throw .malformedEntry(transaction: transaction, reason: "\(error)")
            }
            entries.append(
                ChangeLogEntry(transaction: transaction, author: author, changes: changes, committedAt: committedAt))
        }
        return entries
    }

    /// The highest number committed so far (0 for an empty log).
    public func lastTransaction(on connection: PostgresConnection, logger: Logger) async throws(ChangeLogError) -> Int64
    {
        try await mappingErrors {
            let rows = try await connection.query(
                "SELECT coalesce(max(\"transaction\"), 0) FROM \(unescaped: log)", logger: logger)
            return try await rows.collect().first?.decode(Int64.self) ?? 0
        }
    }

    /// The last number `tailer` saved as handled, registering it at 0 the first time.
    public func position(of tailer: String, on connection: PostgresConnection, logger: Logger)
        async throws(ChangeLogError) -> Int64
    {
        try await mappingErrors {
            try await connection.query(
                "INSERT INTO \(unescaped: positions) (tailer, last) VALUES (\(tailer), 0) ON CONFLICT (tailer) DO NOTHING",
                logger: logger)
            let rows = try await connection.query(
                "SELECT last FROM \(unescaped: positions) WHERE tailer = \(tailer)", logger: logger)
            return try await rows.collect().first?.decode(Int64.self) ?? 0
        }
    }

    /// Records durably that `tailer` has handled every entry up to `last`.
    public func savePosition(
        _ last: Int64, of tailer: String, on connection: PostgresConnection, logger: Logger
    ) async throws(ChangeLogError) {
        try await mappingErrors {
            try await connection.query(
                """
                INSERT INTO \(unescaped: positions) (tailer, last) VALUES (\(tailer), \(last))
                ON CONFLICT (tailer) DO UPDATE SET last = excluded.last, updated_at = clock_timestamp()
                """, logger: logger)
        }
    }
}
