import Foundation
import GRDB

/// Edits of a stopped daemon's SQLite file (`depot.sqlite` in its data directory), for tests that
/// need a daemon in a state it reaches only in a cluster.
public enum DaemonFile {
    /// Records that the daemon's history begins after `transaction`, as a daemon that started from
    /// its cluster's snapshot (joining or rebuilding itself) records it: `store/history` then
    /// refuses an earlier `since` with -32602.
    public static func setHistoryBegins(_ transaction: Int64, dataDirectory: URL) throws {
        let queue = try DatabaseQueue(path: dataDirectory.appendingPathComponent("depot.sqlite").path)
        try queue.write { db in
            try db.execute(
                sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('historyBegins', ?)",
                arguments: [transaction])
        }
        try queue.close()
    }
}
