import DepotProtocol
import DepotStore
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// The store's writes to the cluster's log, one job of ``PostgresReplication``: begins, appends
/// and abandons them on the writer's connection, called on the store's writer, one write at a time.
///
/// It appends the rows the write left in the object tables with the entries (``PostgresObjectTables``),
/// and remembers the newest entry it appended, whose hint the follower then ignores.
final class LogWriter: Sendable {
    /// The log it appends to.
    let log: ChangeLog
    /// This daemon's name in the log's `author` column.
    let node: String
    /// The longest a write waits for the cluster's write lock (held by another daemon's write).
    let lockTimeout: Duration
    /// The writer's connection (blocking the store's writer, one call at a time).
    let connection: BlockingConnection
    /// The objects as tables, written with the entries.
    let objectTables: PostgresObjectTables
    private let logger: Logger
    /// Whether the writer holds the write lock (touched on the store's writer only).
    private let holdsLock = Mutex(false)
    /// The newest entry this daemon appended.
    private let lastOwnEntry = Mutex<Int64>(0)

    init(log: ChangeLog, node: String, connection: BlockingConnection, lockTimeout: Duration, logger: Logger) {
        self.log = log
        self.node = node
        self.connection = connection
        self.lockTimeout = lockTimeout
        self.logger = logger
        objectTables = PostgresObjectTables(log: log)
    }

    /// The newest entry this daemon appended (0 before any): its own NOTIFY hints need no catch-up.
    var newestOwnEntry: Int64 { lastOwnEntry.withLock { $0 } }

    /// Creates the log's tables if missing, and (re)creates the functions the writes call.
    func createSchema() throws(RPCError) {
        try connection.run { [log, logger, objectTables] connection in
            try await log.createSchema(on: connection, logger: logger)
            try await connection.withTransaction(logger: logger) { connection in
                // Daemons starting together would collide replacing the function: one at a time.
                try await connection.query("SELECT pg_advisory_xact_lock(\(log.lockKey))", logger: logger)
                // Its result gained a column (the checksum): a function's result type cannot be replaced.
                try await connection.query(
                    "DROP FUNCTION IF EXISTS \(unescaped: Self.beginWriteFunction(log)) (bigint, bigint)",
                    logger: logger)
                try await connection.query(
                    """
                    CREATE FUNCTION \(unescaped: Self.beginWriteFunction(log)) (after bigint, lock_key bigint)
                    RETURNS TABLE ("transaction" bigint, changes text, changeset bytea, checksum bigint)
                    LANGUAGE plpgsql VOLATILE AS $$
                    BEGIN
                        PERFORM pg_advisory_lock(lock_key);
                        -- A new statement in a VOLATILE function: a snapshot taken after the lock.
                        RETURN QUERY SELECT l."transaction", l.changes::text, l.changeset, l.checksum
                            FROM \(unescaped: log.log) l
                            WHERE l."transaction" > after ORDER BY l."transaction";
                    END
                    $$
                    """, logger: logger)
                try await connection.query(PostgresQuery(unsafeSQL: objectTables.functionStatement), logger: logger)
            }
        }
    }

    /// The function that takes the write lock and reads what follows a position, in one round trip.
    static func beginWriteFunction(_ log: ChangeLog) -> String { "\"\(log.schema)\".depot_begin_write" }

    // A write appends optimistically: `INSERT … WHERE max = n - 1 ON CONFLICT DO NOTHING`, one
    // round trip, committing by itself (only the log is in PostgreSQL). Refused, it is run again under
    // the write lock: a session-level advisory lock held from reading the head until the entry's
    // INSERT has committed, then released. docs/cluster.md argues why the numbering stays safe.

    /// Unlocked: nothing to do. Locked: takes the write lock and reads what follows `position`, in one round trip.
    func begin(after position: Int64, locked: Bool) throws(RPCError) -> [ReplicatedEntry] {
        guard locked else { return [] }
        holdsLock.withLock { $0 = true }
        // The lock may be held by a long write (a big batch) on another daemon: wait for it as a
        // write waits behind a batch on one daemon, up to a bound.
        let rows = try connection.query(
            """
            SELECT "transaction", changes, changeset, checksum
            FROM \(unescaped: LogWriter.beginWriteFunction(log))(\(position), \(log.lockKey))
            """, wait: lockTimeout)
        do {
            return try PostgresReplication.entries(in: rows)
        } catch {
            abandon()
            throw error
        }
    }

    /// Appends `entries` in one statement that commits by itself (``AppendStatement``), with the
    /// rows `change` says the write left in the object tables, then releases the lock if held. A
    /// model change rebuilds the object tables, in one transaction with its entry.
    func commit(_ entries: [ReplicatedEntry], tables change: ObjectTablesChange?) throws(RPCError) -> Bool {
        guard let last = entries.last else { return true }
        // Without the lock, the entries also yield to a writer that holds it (a try-lock, for the
        // statement only): a write that was refused once and waits for the lock then always gets in.
        let statement = AppendStatement(
            entries: entries, node: node, tables: change, locked: holdsLock.withLock { $0 }, log: log)
        let appended: Bool
        do {
            if let change, change.model != nil {
                appended = try rebuildTables(change, appending: statement)
            } else {
                appended = try connection.run { [logger] connection in
                    do {
                        var rows = 0
                        for try await _ in try await connection.execute(statement, logger: logger) { rows += 1 }
                        return rows == 1
                    } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
                        // Another daemon took the number first: refused, the connection kept.
                        return false
                    }
                }
            }
        } catch {
            // The connection was dropped, and the lock with it.
            holdsLock.withLock { $0 = false }
            throw error
        }
        return finishWrite(appended, last: last.number)
    }

    /// Ends a write once its append answered: frees the lock, records the entry as this daemon's.
    private func finishWrite(_ appended: Bool, last: Int64) -> Bool {
        // Committed (or refused): free the lock without waiting; the connection's next query goes after it.
        abandon()
        guard appended else { return false }
        lastOwnEntry.withLock { $0 = max($0, last) }
        return true
    }

    /// Runs `append` and, if it appended, rebuilds the object tables for `change`, in one transaction.
    private func rebuildTables(_ change: ObjectTablesChange, appending append: AppendStatement) throws(RPCError)
        -> Bool
    {
        try self.connection.run(wait: lockTimeout) { [objectTables, logger] connection in
            try await connection.query("BEGIN", logger: logger)
            do {
                var rows = 0
                for try await _ in try await connection.execute(append, logger: logger) { rows += 1 }
                let appended = rows == 1
                if appended { try await objectTables.rebuild(change, on: connection, logger: logger) }
                try await connection.query(appended ? "COMMIT" : "ROLLBACK", logger: logger)
                return appended
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
                // Another daemon took the number first: refused, as the statement alone would be.
                try await connection.query("ROLLBACK", logger: logger)
                return false
            }
            // Any other failure drops the connection, which rolls the transaction back.
        }
    }

    /// Releases the lock if held, without waiting.
    func abandon() {
        let held = holdsLock.withLock { held in
            defer { held = false }
            return held
        }
        guard held else { return }
        // Without a connection there is no lock to free; a failed unlock drops the connection, which frees it.
        connection.send("SELECT pg_advisory_unlock_all()")
    }
}
