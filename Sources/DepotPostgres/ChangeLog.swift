import Foundation
import Logging
import PostgresNIO

/// The tables of the cluster change log of DESIGN section 11 in one PostgreSQL schema: their names,
/// the schema's advisory lock key and NOTIFY channel, and the DDL that creates them.
///
/// ``PostgresReplication`` is the log's only reader and writer: it appends, takes the write lock
/// and follows. docs/cluster.md argues why the numbering is safe.
public struct ChangeLog: Sendable {
    /// The schema that holds the log's tables.
    public let schema: String

    /// The NOTIFY channel whose payload is a new transaction number: a wake-up hint, never the data.
    public var channel: String { "\(schema)_changes" }

    /// The advisory lock that orders the log's writers (and its creation), one key per schema
    /// (PostgreSQL's `pg_advisory_lock(lockKey)`).
    public let lockKey: Int64

    /// The log table's qualified name.
    var log: String { "\"\(schema)\".change_log" }

    /// The table of the `saveId`s of committed saves and their answers, as every replica holds them
    /// (`depot_save_id`), for a replica that starts from a snapshot.
    var saveIDs: String { "\"\(schema)\".save_ids" }

    /// The table where each daemon records the newest entry it applied and when it last said so:
    /// pruning keeps what a daemon seen within the grace period still needs.
    var positions: String { "\"\(schema)\".daemon_positions" }

    /// A log in `schema` (a lowercase SQL identifier).
    public init(schema: String = "depot") throws(ChangeLogError) {
        guard Self.isPlainIdentifier(schema) else { throw .invalidSchemaName(schema) }
        self.schema = schema
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

    /// Creates the schema and the log's table if missing. Daemons starting together may all call it.
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
                // The checksum of the objects the entry leaves (DESIGN section 11, docs/cluster.md).
                try await connection.query(
                    "ALTER TABLE \(unescaped: log) ADD COLUMN IF NOT EXISTS checksum bigint", logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS \(unescaped: saveIDs) (
                                save_id text PRIMARY KEY,
                                transaction_id bigint NOT NULL,
                                answer text NOT NULL
                    )
                    """, logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS \(unescaped: positions) (
                                node text PRIMARY KEY,
                                "position" bigint NOT NULL,
                                seen_at timestamptz NOT NULL
                    )
                    """, logger: logger)
            }
        }
    }

    /// The lowest number the log still holds (0 for an empty log): pruning removed those before it.
    public func firstTransaction(on connection: PostgresConnection, logger: Logger) async throws(ChangeLogError)
        -> Int64
    {
        try await mappingErrors {
            let rows = try await connection.query(
                "SELECT coalesce(min(\"transaction\"), 0) FROM \(unescaped: log)", logger: logger)
            return try await rows.collect().first?.decode(Int64.self) ?? 0
        }
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
}
