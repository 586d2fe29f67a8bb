import DepotProtocol
import Foundation
import GRDB

/// Persistent history: one row per committed transaction in `depot_transaction`,
/// so that a client that was away can catch up with `store/history`.
enum HistoryLog {
    /// Records a transaction inside the writer's transaction and returns it.
    static func record(_ db: Database, author: String?, changes: [String: EntityChangeSet], retention: HistoryRetention)
        throws -> CommittedTransaction
    {
        let timestamp = Date().timeIntervalSince1970
        let wire = JSONValue.object(changes.mapValues(\.json))
        try db.executeCached(
            sql: "INSERT INTO depot_transaction (timestamp, author, changes) VALUES (?, ?, ?)",
            arguments: [timestamp, author, String(decoding: JSONWriter.encode(wire), as: UTF8.self)])
        let number = db.lastInsertedRowID
        if number % 64 == 0 { try prune(db, latest: number, retention: retention, now: timestamp) }
        return CommittedTransaction(number: number, author: author, timestamp: timestamp, changes: changes)
    }

    /// Drops transactions that retention no longer keeps (every 64 commits, inside the committing transaction).
    static func prune(_ db: Database, latest: Int64, retention: HistoryRetention, now: Double) throws {
        switch retention {
        case .count(let count):
            try db.executeCached(sql: "DELETE FROM depot_transaction WHERE id <= ?", arguments: [latest - Int64(count)])
        case .age(let seconds):
            try db.executeCached(
                sql: "DELETE FROM depot_transaction WHERE timestamp < ? AND id < ?", arguments: [now - seconds, latest])
        case .forever:
            break
        }
    }

    static func transactions(_ db: Database, since: Int64, limit: Int) throws -> [TransactionRecord] {
        let rows = try Row.fetchAll(
            db, sql: "SELECT id, timestamp, author, changes FROM depot_transaction WHERE id > ? ORDER BY id LIMIT ?",
            arguments: [since, limit])
        return try rows.map { row in
            let text: String = row["changes"]
            let changes = try JSONDecoder().decode([String: EntityChanges].self, from: Data(text.utf8))
            return TransactionRecord(
                transaction: row["id"], timestamp: ISO8601.string(from: row["timestamp"]), author: row["author"],
                changes: changes)
        }
    }
}

extension Store {
    /// `store/history`: the committed transactions after `since`, oldest first.
    public func history(since: Int64, limit: Int?) throws(RPCError) -> StoreHistory.Result {
        let limit = min(max(limit ?? 1000, 1), 10_000)
        return try read { db in
            let transactions = try HistoryLog.transactions(db, since: since, limit: limit)
            let latest = try Self.latestTransaction(db)
            let oldest = try Int64.fetchOneCached(db, sql: "SELECT MIN(id) FROM depot_transaction") ?? latest
            return StoreHistory.Result(transactions: transactions, latest: latest, oldest: oldest)
        }
    }
}
