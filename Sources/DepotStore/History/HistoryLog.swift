import DepotProtocol
import Foundation
import GRDB

/// Persistent history: one row per committed transaction in `depot_transaction`,
/// so that a client that was away can catch up with `store/history`.
enum HistoryLog {
    /// Records a transaction inside the writer's transaction and returns it.
    ///
    /// With the changes go the values before and after of the keys that
    /// row-level scopes read, for the entities whose capture is installed
    /// (``ScopeCapture``). The changes are stored compactly (``HistoryCoding``); `bytes` keeps the
    /// running total of what history has stored, so that a size bound prunes
    /// with one indexed delete instead of summing the table.
    static func record(
        _ db: Database, schema: Schema, author: String?, changes: [String: EntityChangeSet],
        retention: HistoryRetention,
        captured: [String: [String]]
    )
        throws -> CommittedTransaction
    {
        let timestamp = Date().timeIntervalSince1970
        var changes = changes
        if !captured.isEmpty {
            for (entity, values) in try ScopeCapture.values(
                db, schema: schema, changes: changes, captured: captured)
            {
                changes[entity]?.recorded = values
            }
        }
        let text = String(decoding: HistoryCoding.encode(changes), as: UTF8.self)
        let number = try insert(db, number: nil, timestamp: timestamp, author: author, text: text, retention: retention)
        return CommittedTransaction(number: number, author: author, timestamp: timestamp, changes: changes)
    }

    /// Records a migration of a cluster's replica as the transaction numbered `number` (the next
    /// one): a row with no object changes. Unlike ``record(_:schema:author:changes:retention:captured:)``
    /// it forgets no `saveId`s, which a replica learns of only from a changeset.
    static func recordMigration(
        _ db: Database, number: Int64, timestamp: Double, author: String?, retention: HistoryRetention
    ) throws -> CommittedTransaction {
        let text = String(decoding: HistoryCoding.encode([:]), as: UTF8.self)
        _ = try insert(db, number: number, timestamp: timestamp, author: author, text: text, retention: retention)
        return CommittedTransaction(number: number, author: author, timestamp: timestamp, changes: [:])
    }

    /// Stores one transaction's row, numbered `number` (a replica applying the cluster's log) or
    /// next (`nil`), pruning what retention drops every 64 numbers; returns its number.
    ///
    /// The writer (`number` is `nil`) also forgets the `saveId`s of the pruned transactions
    /// (``SaveIdLog/prune(_:)``); a replica applying the log gets that prune in the changeset.
    static func insert(
        _ db: Database, number: Int64?, timestamp: Double, author: String?, text: String, retention: HistoryRetention
    ) throws -> Int64 {
        // The running total is the newest row's plus this one's, added up inside the insert: a
        // separate read of the newest row would cost every commit a fetch. Read back only to prune.
        let size = Int64(text.utf8.count + (author?.utf8.count ?? 0)) + rowOverhead
        try db.executeCached(
            sql: """
                INSERT INTO depot_transaction (id, timestamp, author, changes, bytes) VALUES (?, ?, ?, ?,
                    IFNULL((SELECT bytes FROM depot_transaction ORDER BY id DESC LIMIT 1), 0) + ?)
                """,
            arguments: [number, timestamp, author, text, size])
        let inserted = db.lastInsertedRowID
        if inserted % 64 == 0 {
            let bytes =
                try Int64.fetchOneCached(
                    db, sql: "SELECT bytes FROM depot_transaction WHERE id = ?", arguments: [inserted])
                ?? size
            try prune(db, latest: inserted, bytes: bytes, retention: retention, now: timestamp)
            if number == nil { try SaveIdLog.prune(db) }
        }
        return inserted
    }

    /// What a history row costs beyond its text: the row header, id, timestamp, running total and page slack.
    static let rowOverhead: Int64 = 40

    /// Drops transactions that retention no longer keeps (every 64 commits, inside the committing transaction).
    static func prune(_ db: Database, latest: Int64, bytes: Int64, retention: HistoryRetention, now: Double) throws {
        switch retention {
        case .count(let count):
            try db.executeCached(sql: "DELETE FROM depot_transaction WHERE id <= ?", arguments: [latest - Int64(count)])
        case .age(let seconds):
            try db.executeCached(
                sql: "DELETE FROM depot_transaction WHERE timestamp < ? AND id < ?", arguments: [now - seconds, latest])
        case .size(let limit):
            // Rows from before the running total existed have none: they go first.
            try db.executeCached(
                sql: "DELETE FROM depot_transaction WHERE IFNULL(bytes, 0) <= ? AND id < ?",
                arguments: [bytes - limit, latest])
        case .all(let bounds):
            for bound in bounds { try prune(db, latest: latest, bytes: bytes, retention: bound, now: now) }
        case .forever:
            break
        }
    }

    /// The stored transactions after `since`, oldest first, with their changes decoded.
    static func entries(_ db: Database, since: Int64, limit: Int) throws -> [(
        number: Int64, timestamp: Double, author: String?, changes: [String: EntityChangeSet]
    )] {
        let rows = try Row.fetchAll(
            db, sql: "SELECT id, timestamp, author, changes FROM depot_transaction WHERE id > ? ORDER BY id LIMIT ?",
            arguments: [since, limit])
        return try rows.map { row in
            (row["id"], row["timestamp"], row["author"], try HistoryCoding.decode(row["changes"]))
        }
    }

    static func transactions(_ db: Database, since: Int64, limit: Int) throws -> [TransactionRecord] {
        try entries(db, since: since, limit: limit).map { entry in
            TransactionRecord(
                transaction: entry.number, timestamp: ISO8601.string(from: entry.timestamp), author: entry.author,
                changes: entry.changes.mapValues(\.wire))
        }
    }

    /// Bytes history holds now, by its running total (the benchmarks report it per transaction).
    static func storedBytes(_ db: Database) throws -> Int64 {
        let newest = try Int64.fetchOne(db, sql: "SELECT bytes FROM depot_transaction ORDER BY id DESC LIMIT 1") ?? 0
        let oldest = try Row.fetchOne(
            db, sql: "SELECT bytes, length(changes) FROM depot_transaction ORDER BY id LIMIT 1")
        guard let oldest, let first: Int64 = oldest[0] else { return newest }
        let firstLength: Int64 = oldest[1]
        return newest - first + firstLength + rowOverhead
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

    /// One stored transaction as ``history(since:limit:filter:)`` hands it to its filter.
    public struct HistoryEntry: Sendable {
        /// The transaction's number.
        public var number: Int64
        /// Who made it.
        public var author: String?
        /// Its changes, with the values row-level scopes read where they were recorded.
        public var changes: [String: EntityChangeSet]
    }

    /// `store/history` as `filter` sees it: the transactions after `since`,
    /// oldest first, each as `filter` turns it into wire changes, left out when
    /// it returns `nil`. Reads on past left-out ones until `limit` are found or
    /// history ends, so a client paging from the last one it got misses nothing.
    public func history(
        since: Int64, limit: Int?, filter: (HistoryEntry) throws(RPCError) -> [String: EntityChanges]?
    ) throws(RPCError) -> StoreHistory.Result {
        let limit = min(max(limit ?? 1000, 1), 10_000)
        return try read { db in
            var transactions: [TransactionRecord] = []
            var after = since
            while transactions.count < limit {
                let page = try HistoryLog.entries(db, since: after, limit: limit)
                for entry in page where transactions.count < limit {
                    let kept = try filter(
                        HistoryEntry(number: entry.number, author: entry.author, changes: entry.changes))
                    if let kept {
                        transactions.append(
                            TransactionRecord(
                                transaction: entry.number, timestamp: ISO8601.string(from: entry.timestamp),
                                author: entry.author, changes: kept))
                    }
                }
                guard page.count == limit, let last = page.last else { break }
                after = last.number
            }
            let latest = try Self.latestTransaction(db)
            let oldest = try Int64.fetchOneCached(db, sql: "SELECT MIN(id) FROM depot_transaction") ?? latest
            return StoreHistory.Result(transactions: transactions, latest: latest, oldest: oldest)
        }
    }

    /// What history stores now, in bytes (its rows' text and overhead; SQLite's pages add a little).
    public func historyBytes() throws(RPCError) -> Int64 {
        try read { db in try HistoryLog.storedBytes(db) }
    }
}
