import Foundation
import GRDBSQLite

/// The SQLite baseline: a connection through the C API with the pragmas
/// `depotd`'s store uses (WAL, `synchronous = NORMAL`, foreign keys on, as
/// GRDB sets them), and prepared statements reused across iterations.
final class RawSQLite {
    /// The connection handle.
    let handle: OpaquePointer

    /// Opens (creating) the database at `path` with Depot's pragmas.
    init(path: String) throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK, let handle else {
            throw BenchmarkError("cannot open \(path)")
        }
        self.handle = handle
        sqlite3_busy_timeout(handle, 10_000)
        try execute("PRAGMA journal_mode = WAL")
        try execute("PRAGMA synchronous = NORMAL")
        try execute("PRAGMA foreign_keys = ON")
    }

    deinit { sqlite3_close_v2(handle) }

    /// Runs one or more statements, discarding rows.
    func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(handle, sql, nil, nil, &message) == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? "error"
            sqlite3_free(message)
            throw BenchmarkError("\(text) in \(sql)")
        }
    }

    /// Prepares `sql` for repeated use.
    func prepare(_ sql: String) throws -> Statement {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK,
            let statement
        else {
            throw BenchmarkError("\(String(cString: sqlite3_errmsg(handle))) in \(sql)")
        }
        return Statement(handle: statement, database: handle)
    }

    /// Creates the entity tables and indexes (`e_*`) of the database at `path`
    /// (a daemon's store) with their exact DDL, so that a baseline writes rows of
    /// the same shape into the same indexes. Returns the statements run.
    @discardableResult
    func copySchema(fromDatabaseAt path: String) throws -> [String] {
        let source = try RawSQLite(path: path)
        let select = try source.prepare(
            #"SELECT sql FROM sqlite_master WHERE tbl_name LIKE 'e\_%' ESCAPE '\' AND sql IS NOT NULL ORDER BY type DESC, name"#
        )
        var statements: [String] = []
        try select.run { row in statements.append(String(cString: sqlite3_column_text(row, 0))) }
        guard !statements.isEmpty else { throw BenchmarkError("no entity tables in \(path)") }
        try execute(statements.joined(separator: ";\n"))
        return statements
    }

    /// The rowid of the last insert.
    var lastInsertedRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// A prepared statement: bind, step to the end, reset.
    final class Statement {
        /// The statement handle.
        let handle: OpaquePointer
        private let database: OpaquePointer

        init(handle: OpaquePointer, database: OpaquePointer) {
            self.handle = handle
            self.database = database
        }

        deinit { sqlite3_finalize(handle) }

        /// Binds an integer to parameter `index` (from 1).
        func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(handle, index, value) }

        /// Binds a double to parameter `index`.
        func bind(_ index: Int32, _ value: Double) { sqlite3_bind_double(handle, index, value) }

        /// Binds text to parameter `index` (copied by SQLite).
        func bind(_ index: Int32, _ value: String) {
            let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
            sqlite3_bind_text(handle, index, value, -1, transient)
        }

        /// Steps until done, calling `row` for every row; then resets.
        func run(_ row: ((OpaquePointer) -> Void)? = nil) throws {
            defer { sqlite3_reset(handle) }
            while true {
                switch sqlite3_step(handle) {
                case SQLITE_ROW: row?(handle)
                case SQLITE_DONE: return
                default: throw BenchmarkError(String(cString: sqlite3_errmsg(database)))
                }
            }
        }
    }
}
