import DepotProtocol
import Foundation
import GRDB
import Synchronization

/// The cluster's objects at one position of its log, read in one snapshot of the tables that
/// hold them (DESIGN.md section 11): what a new replica starts from instead of the whole log.
public struct ReplicaSnapshot: Sendable {
    /// The log entry the objects are at: the replica follows the log from the next one.
    public var position: Int64
    /// The history number of the newest transaction at ``position`` (history begins after it).
    public var transaction: Int64
    /// The model's version at ``position``.
    public var version: Int64
    /// The model's entities at ``position``.
    public var entities: [EntityDescription]
    /// For each entity table, the highest id ever given (deleted objects' ids are never reused).
    public var highestIDs: [String: Int64]
    /// The checksum the log's entry at ``position`` carries (``ReplicaChecksum``), if it carries one.
    public var checksum: Int64?

    /// The name under which a snapshot hands over the ids of committed saves, with their answers
    /// (`save_id`, `transaction_id`, `answer`), after the object tables.
    public static let saveIDsTable = SaveIdLog.table

    /// A snapshot.
    public init(
        position: Int64, transaction: Int64, version: Int64, entities: [EntityDescription],
        highestIDs: [String: Int64], checksum: Int64? = nil
    ) {
        self.checksum = checksum
        self.position = position
        self.transaction = transaction
        self.version = version
        self.entities = entities
        self.highestIDs = highestIDs
    }
}

extension StoreReplication {
    /// No snapshot: a replica replays the log from its start.
    public func readSnapshot(
        begin: (ReplicaSnapshot) throws -> Void, rows: (_ table: String, _ batch: ReplicaSnapshot.Batch) throws -> Void
    ) throws -> Bool { false }
}

extension ReplicaSnapshot {
    /// Rows of one table of a snapshot, as the store stores them: ``values`` holds one value per
    /// column of ``columns`` for each row, row after row (one array for the batch, not one per row).
    public struct Batch: Sendable {
        /// The table's columns, in the order each row's values come.
        public var columns: [String]
        /// `columns.count` values per row.
        public var values: [DatabaseValue]

        /// A batch of `values.count / columns.count` rows.
        public init(columns: [String], values: [DatabaseValue]) {
            self.columns = columns
            self.values = values
        }

        /// The number of rows.
        public var count: Int { columns.isEmpty ? 0 : values.count / columns.count }
    }
}

extension Store {
    /// Where this replica's history begins: it joined the cluster from a snapshot after that
    /// transaction (nil: it has every transaction its retention keeps).
    public func historyBegins() throws(RPCError) -> Int64? {
        try read { db in
            try Int64.fetchOne(db, sql: "SELECT CAST(value AS INTEGER) FROM depot_meta WHERE key = 'historyBegins'")
        }
    }

    /// Starts a new, empty replica from the cluster's snapshot, when the cluster has one past
    /// the start of its log; does nothing otherwise. Returns whether it loaded the snapshot.
    func bootstrapFromCluster() throws(RPCError) -> Bool {
        guard let replication, clusterPosition.withLock({ $0 }) == 0, schema.entities.isEmpty else { return false }
        let loaded: (schema: Schema, position: Int64)?
        do {
            loaded = try pool.write { db in try Self.load(db, from: replication) }
        } catch {
            throw .internalError("this replica could not start from the cluster's snapshot: \(error)")
        }
        guard let loaded else { return false }
        replaceSchema(loaded.schema)
        clusterPosition.withLock { $0 = loaded.position }
        return true
    }

    /// Rebuilds this replica from the cluster's snapshot, in one local transaction: it can no
    /// longer follow the log (`reason`: the log was pruned past it, a changeset did not apply,
    /// a checksum differed). Reads are refused until it succeeds (a failure leaves them refused:
    /// the next catch-up or write tries again); the commits not yet published
    /// are dropped (the snapshot supersedes them) and ``takeRebuild()`` then says the subscribers
    /// must resync. Runs on the writer, between writes.
    func rebuildFromCluster(because reason: String) throws(RPCError) {
        guard let replication else { return }
        // Until it is rebuilt the replica serves no read: it is known to be behind or wrong.
        rebuilding.store(true, ordering: .releasing)
        let loaded: (schema: Schema, position: Int64)
        do {
            loaded = try pool.write { db in
                try Self.emptyReplica(db)
                // Nothing to rebuild from: the transaction rolls back, the replica stays as it was.
                guard let loaded = try Self.load(db, from: replication) else { throw NoSnapshot() }
                return loaded
            }
        } catch is NoSnapshot {
            throw .internalError(
                "this replica diverged from the cluster's log (\(reason)) and the cluster keeps no snapshot to rebuild it from: start the daemon on an empty data directory to rebuild it from the log"
            )
        } catch {
            throw .internalError("this replica could not rebuild itself from the cluster's snapshot: \(error)")
        }
        replaceSchema(loaded.schema)
        clusterPosition.withLock { $0 = loaded.position }
        divergence.withLock { $0 = nil }
        _ = commits.take()
        rebuilt.store(true, ordering: .releasing)
        rebuilding.store(false, ordering: .releasing)
    }

    /// Compares the replica's objects, read in full, with the checksum it recorded: a file changed
    /// behind the daemon's back (or damaged) makes it rebuild itself from the snapshot. A replica
    /// that recorded none (made before checksums) records it now.
    func verifyChecksum() throws(RPCError) {
        let (recorded, actual) = try Self.mapErrors {
            try pool.write { db -> (UInt64, UInt64) in
                let actual = try ReplicaChecksum.full(db)
                guard let recorded = try Self.storedChecksum(db) else {
                    try Self.saveChecksum(db, actual, offset: 0)
                    return (actual, actual)
                }
                return (recorded.checksum, actual)
            }
        }
        guard recorded != actual else { return }
        let reason =
            "its objects' checksum is \(actual), it recorded \(recorded): its file was changed behind its back"
        divergence.withLock { $0 = .internalError("this replica diverged (\(reason)); rebuilding it") }
        try rebuildFromCluster(because: reason)
    }

    /// Rebuilds the replica if it is known to have diverged and a rebuild failed before.
    func repairIfDiverged() throws(RPCError) {
        guard let divergence = divergence.withLock({ $0 }) else { return }
        try rebuildFromCluster(because: divergence.message)
    }

    /// Whether the replica rebuilt itself since the last call (its result sets are stale: every
    /// subscriber must resync); clears it.
    public func takeRebuild() -> Bool {
        rebuilt.exchange(false, ordering: .acquiringAndReleasing)
    }

    /// Removes every object, the model, history, the ids of saves and the results cache, for ``load(_:from:)``.
    private static func emptyReplica(_ db: Database) throws {
        let tables = try String.fetchAll(
            db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND (name GLOB 'e_*' OR name GLOB 'j_*')")
        for table in tables { try db.execute(sql: "DROP TABLE \(EntitySchema.quote(table))") }
        try db.execute(
            sql: """
                DELETE FROM depot_meta WHERE key IN ('model', 'modelVersion', 'historyBegins');
                DELETE FROM depot_transaction;
                DELETE FROM sqlite_sequence;
                DELETE FROM depot_results_cache;
                DELETE FROM depot_save_id;
                """)
    }

    /// Fills the empty replica `db` from the cluster's snapshot, read as it goes (one batch of rows
    /// in memory), inside the caller's local transaction: the model (at the cluster's version),
    /// every row (``SnapshotLoader``), the ids already given, the history number, the position, the
    /// checksum. Returns the model and the position, nil when the cluster keeps no snapshot.
    ///
    /// Only the page cache is enlarged for the load: the store keeps SQLite in WAL mode, where a
    /// commit at `synchronous = NORMAL` writes the WAL without an fsync and the checkpoint after
    /// the commit syncs it once before copying it into the file, so `synchronous = OFF` would save
    /// nothing for one large transaction (and a power loss before that checkpoint loses the load,
    /// not the file: the replica starts from the snapshot again); `journal_mode = OFF` cannot be
    /// set while the pool's connections share the WAL.
    static func load(_ db: Database, from replication: any StoreReplication) throws -> (
        schema: Schema, position: Int64
    )? {
        let cacheSize = try Int.fetchOne(db, sql: "PRAGMA cache_size") ?? -2000
        // 128 MiB while the tables fill and their indexes are built, then as it was.
        try db.execute(sql: "PRAGMA cache_size = -131072")
        let loaded: Result<(schema: Schema, position: Int64)?, any Error>
        do {
            loaded = .success(try fill(db, from: replication))
        } catch {
            loaded = .failure(error)
        }
        try db.execute(sql: "PRAGMA cache_size = \(cacheSize)")
        return try loaded.get()
    }

    /// ``load(_:from:)`` without its pragma.
    private static func fill(_ db: Database, from replication: any StoreReplication) throws -> (
        schema: Schema, position: Int64
    )? {
        var started: (schema: Schema, snapshot: ReplicaSnapshot, tables: Set<String>)?
        var loader: SnapshotLoader?
        let found = try replication.readSnapshot(
            begin: { snapshot in
                var (schema, _) = try ModelMigrator.migrate(db, from: .empty, to: snapshot.entities)
                schema = Schema(version: snapshot.version, entities: schema.entities)
                try db.execute(
                    sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('modelVersion', ?)",
                    arguments: [String(snapshot.version)])
                // The tables the model has; a table left in PostgreSQL by hand is not loaded.
                var tables: Set<String> = [SaveIdLog.table]
                for entity in schema.entities {
                    tables.insert(entity.tableName)
                    for join in entity.joins.values where join.isFirstSide { tables.insert(join.name) }
                }
                loader = try SnapshotLoader(db, tables: tables.sorted())
                started = (schema, snapshot, tables)
            },
            rows: { table, batch in
                guard let tables = started?.tables, tables.contains(table) else { return }
                try loader?.insert(into: table, batch)
            })
        guard found, let started, let loader, started.snapshot.position > 0 else { return nil }
        try loader.finish()
        let (schema, snapshot, _) = started
        var sequences = snapshot.highestIDs
        sequences["depot_transaction"] = snapshot.transaction
        for (table, highest) in sequences where highest > 0 {
            try db.execute(sql: "DELETE FROM sqlite_sequence WHERE name = ?", arguments: [table])
            try db.execute(sql: "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", arguments: [table, highest])
        }
        try db.execute(
            sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('historyBegins', ?)",
            arguments: [String(snapshot.transaction)])
        try saveClusterPosition(db, snapshot.position)
        // The replica's own checksum, kept while loading; any offset from the log's says the tables
        // differ from the log.
        let checksum = loader.checksum
        try saveChecksum(db, checksum, offset: snapshot.checksum.map { checksum ^ UInt64(bitPattern: $0) } ?? 0)
        return (schema, snapshot.position)
    }
}

/// The cluster keeps no snapshot to rebuild a replica from.
private struct NoSnapshot: Error {}
