import CSQLiteSession
import Foundation
import GRDB

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
                { _, conflict, iterator in resolveConflict(conflict, iterator) }, nil)
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

/// What to do about a conflict while applying a changeset: abort, but for the ids of saves.
///
/// A replica that joined or rebuilt from a snapshot lacks the ids saved before: another replica's
/// prune of them finds none here (omitted), and one it still holds is replaced. Object rows that
/// are not what the changeset expects are a divergence: the apply aborts.
private func resolveConflict(_ conflict: Int32, _ iterator: OpaquePointer?) -> Int32 {
    var table: UnsafePointer<CChar>?
    var columns: Int32 = 0
    var operation: Int32 = 0
    var indirect: Int32 = 0
    guard sqlite3changeset_op(iterator, &table, &columns, &operation, &indirect) == 0, let table,
        String(cString: table) == SaveIdLog.table
    else { return 2 /* SQLITE_CHANGESET_ABORT */ }
    switch conflict {
    case 2 /* SQLITE_CHANGESET_NOTFOUND */: return 0 /* SQLITE_CHANGESET_OMIT */
    case 1 /* SQLITE_CHANGESET_DATA */, 3 /* SQLITE_CHANGESET_CONFLICT */: return 1 /* SQLITE_CHANGESET_REPLACE */
    default: return 2
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

extension ChangeSession {
    /// The integer keys of the rows `rows` touch, table by table in their order: those inserted
    /// or updated, and those deleted (`[id]` for an entity's row, `[a, b]` for a pair).
    static func changedKeys(_ rows: [ChangedRow]) throws(ReplicationError) -> [(
        table: String, written: [[Int64]], deleted: [[Int64]]
    )] {
        var tables: [(table: String, written: [[Int64]], deleted: [[Int64]])] = []
        var index: [String: Int] = [:]
        for row in rows {
            // An insert has new values only; an update has its key among the old ones, a delete all of them.
            let values = row.operation == .insert ? row.new : row.old
            var key: [Int64] = []
            for (column, isKey) in row.primaryKey.enumerated() where isKey {
                guard column < values.count, let value = values[column].flatMap(Int64.fromDatabaseValue) else {
                    throw .changeset("cannot read the key of a changed row")
                }
                key.append(value)
            }
            let position: Int
            if let known = index[row.table] {
                position = known
            } else {
                position = tables.count
                index[row.table] = position
                tables.append((row.table, [], []))
            }
            if row.operation == .delete {
                tables[position].deleted.append(key)
            } else {
                tables[position].written.append(key)
            }
        }
        return tables
    }
}

/// One row a changeset changes: its table, what happened, and the values it carries.
struct ChangedRow {
    /// The row was inserted, updated or deleted.
    enum Operation { case insert, update, delete }

    /// The table's name.
    var table: String
    /// What happened to the row.
    var operation: Operation
    /// Whether each column is part of the primary key.
    var primaryKey: [Bool]
    /// The values before, by column (nil: not in the changeset; an update carries the key and the changed columns).
    var old: [DatabaseValue?]
    /// The values after, by column (nil: not in the changeset; an update carries the changed columns).
    var new: [DatabaseValue?]
}

extension ChangeSession {
    /// Every row `changeset` changes, in its order, with the values it carries.
    static func changedRows(_ changeset: [UInt8]) throws(ReplicationError) -> [ChangedRow] {
        guard !changeset.isEmpty else { return [] }
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: changeset.count, alignment: 1)
        defer { bytes.deallocate() }
        bytes.copyBytes(from: changeset)
        var iterator: OpaquePointer?
        guard sqlite3changeset_start(&iterator, Int32(bytes.count), bytes.baseAddress) == 0, let iterator else {
            throw .changeset("cannot read a changeset")
        }
        defer { sqlite3changeset_finalize(iterator) }
        var rows: [ChangedRow] = []
        while sqlite3changeset_next(iterator) == 100 /* SQLITE_ROW */ {
            var name: UnsafePointer<CChar>?
            var columns: Int32 = 0
            var code: Int32 = 0
            var indirect: Int32 = 0
            var primaryKey: UnsafeMutablePointer<UInt8>?
            var keyColumns: Int32 = 0
            guard sqlite3changeset_op(iterator, &name, &columns, &code, &indirect) == 0, let name,
                sqlite3changeset_pk(iterator, &primaryKey, &keyColumns) == 0, let primaryKey
            else { throw .changeset("cannot read a change of a changeset") }
            let operation: ChangedRow.Operation =
                switch code {
                case 18 /* SQLITE_INSERT */: .insert
                case 9 /* SQLITE_DELETE */: .delete
                default: .update
                }
            func values(_ read: (OpaquePointer, Int32, UnsafeMutablePointer<OpaquePointer?>) -> Int32)
                -> [DatabaseValue?]
            {
                (0..<columns).map { column -> DatabaseValue? in
                    var value: OpaquePointer?
                    guard read(iterator, column, &value) == 0, let value else { return nil }
                    return databaseValue(value)
                }
            }
            rows.append(
                ChangedRow(
                    table: String(cString: name), operation: operation,
                    primaryKey: (0..<Int(columns)).map { primaryKey[$0] != 0 },
                    old: operation == .insert ? [] : values(sqlite3changeset_old),
                    new: operation == .delete ? [] : values(sqlite3changeset_new)))
        }
        return rows
    }
}

/// A changeset's value as GRDB holds one.
private func databaseValue(_ value: OpaquePointer) -> DatabaseValue {
    switch sqlite3_value_type(value) {
    case 1 /* SQLITE_INTEGER */: return sqlite3_value_int64(value).databaseValue
    case 2 /* SQLITE_FLOAT */: return sqlite3_value_double(value).databaseValue
    case 3 /* SQLITE_TEXT */:
        let count = Int(sqlite3_value_bytes(value))
        guard let text = sqlite3_value_text(value) else { return "".databaseValue }
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self).databaseValue
    case 4 /* SQLITE_BLOB */:
        let count = Int(sqlite3_value_bytes(value))
        guard let bytes = sqlite3_value_blob(value) else { return Data().databaseValue }
        return Data(bytes: bytes, count: count).databaseValue
    default: return .null
    }
}
