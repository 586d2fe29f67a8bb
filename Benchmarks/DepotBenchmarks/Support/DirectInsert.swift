import Foundation
import GRDBSQLite

extension DaemonProcess {
    /// Writes `count` rows straight into the daemon's database file with one prepared `insert`,
    /// in one transaction; `bind` binds row `index` (1 through `count`). The daemon reads them
    /// like any committed rows. Setup only: nothing here is measured.
    func insertDirectly(
        _ count: Int, with insert: String, bind: (_ statement: OpaquePointer?, _ index: Int) -> Void
    ) throws {
        var db: OpaquePointer?
        guard sqlite3_open(dataDirectory.appendingPathComponent("depot.sqlite").path, &db) == SQLITE_OK else {
            throw BenchmarkError("open")
        }
        defer { sqlite3_close(db) }
        sqlite3_busy_timeout(db, 10_000)
        sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil)
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, insert, -1, &statement, nil)
        for index in 1...count {
            bind(statement, index)
            guard sqlite3_step(statement) == SQLITE_DONE else { throw BenchmarkError("seed insert failed") }
            sqlite3_reset(statement)
        }
        sqlite3_finalize(statement)
        guard sqlite3_exec(db, "COMMIT", nil, nil, nil) == SQLITE_OK else {
            throw BenchmarkError(String(cString: sqlite3_errmsg(db)))
        }
    }
}
