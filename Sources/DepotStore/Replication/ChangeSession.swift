import CSQLiteSession

/// Records what one write transaction changes in the object tables, as an
/// SQLite changeset that another replica applies to reach the same rows
/// (SQLite's session extension).
///
/// Only tables that hold objects are recorded (entity tables and join
/// tables) and the ids of committed saves (``SaveIdLog``), so that a save
/// resent to another replica is recognized; never Depot's other tables
/// (`depot_…`) or SQLite's. Use it on the writer's
/// connection, inside the transaction, from ``start(on:)`` to ``changeset()``.
final class ChangeSession {
    private let session: OpaquePointer

    /// Starts recording on `connection` (a GRDB `Database.sqliteConnection`).
    init(on connection: OpaquePointer) throws(ReplicationError) {
        var session: OpaquePointer?
        guard sqlite3session_create(connection, "main", &session) == 0, let session else {
            throw .changeset("cannot start an SQLite session (is libsqlite3 built with SQLITE_ENABLE_SESSION?)")
        }
        self.session = session
        sqlite3session_table_filter(session, { _, table in isReplicatedTable(table) }, nil)
        guard sqlite3session_attach(session, nil) == 0 else {
            sqlite3session_delete(session)
            throw .changeset("cannot attach the SQLite session to the store's tables")
        }
    }

    deinit { sqlite3session_delete(session) }

    /// The changes so far, as a changeset (empty when nothing changed).
    func changeset() throws(ReplicationError) -> [UInt8] {
        var count: Int32 = 0
        var bytes: UnsafeMutableRawPointer?
        guard sqlite3session_changeset(session, &count, &bytes) == 0 else {
            throw .changeset("cannot read the SQLite session's changeset")
        }
        defer { sqlite3_free(bytes) }
        guard let bytes, count > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: bytes, count: Int(count)))
    }

    /// Applies `changeset` on `connection`, inside its open transaction.
    ///
    /// Replicas apply every transaction in the one cluster order, so a
    /// conflict (a row missing or different from what the changeset expects)
    /// means this replica diverged: the apply stops and nothing of it stays.
    static func apply(_ changeset: [UInt8], on connection: OpaquePointer) throws(ReplicationError) {
        guard !changeset.isEmpty else { return }
        var bytes = changeset
        let code = bytes.withUnsafeMutableBytes { buffer in
            sqlite3changeset_apply(
                connection, Int32(buffer.count), buffer.baseAddress, { _, table in isReplicatedTable(table) },
                { _, _, _ in 2 /* SQLITE_CHANGESET_ABORT */ }, nil)
        }
        guard code == 0 else {
            let message = sqlite3_errmsg(connection).map { String(cString: $0) } ?? "code \(code)"
            // SQLITE_ABORT (the conflict handler) and SQLITE_CONSTRAINT: the rows are not what the
            // changeset expects. Anything else (disk full, I/O) may pass: try again later.
            guard code == 4 || code & 0xff == 19 else {
                throw .transient("a replicated transaction could not be applied (\(message), code \(code))")
            }
            throw .changeset("a replicated transaction does not apply to this replica (\(message))")
        }
    }
}

/// Whether `table` is replicated: it holds objects (an entity's `e_…` table or a join table) or
/// the `saveId`s of committed saves (``SaveIdLog``): 1 or 0, for SQLite.
private func isReplicatedTable(_ table: UnsafePointer<CChar>?) -> Int32 {
    guard let table else { return 0 }
    let name = String(cString: table)
    if name == SaveIdLog.table { return 1 }
    return name.hasPrefix("depot_") || name.hasPrefix("sqlite_") ? 0 : 1
}
