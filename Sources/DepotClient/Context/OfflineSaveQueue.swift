import DepotProtocol
import Foundation
import GRDB

/// The saves an ``ObjectContext`` queued in its persistent store while the daemon was out of reach
/// (DESIGN.md §9), in order, and the replays the daemon refused until they are dismissed: the
/// offline queue, its own type beside the context's objects (``ContextReplicaFile``), on the same
/// file. Every write is committed with `synchronous = FULL` (``ReplicaFile``), so a queued save
/// survives a crash or a power cut once ``enqueue(_:objects:removing:)`` returns.
final class OfflineSaveQueue: Sendable {
    /// A save queued in the file.
    struct Pending: Sendable {
        /// Its place in the queue.
        var number: Int64
        /// The `store/save` params, `saveId` and merge policy included.
        var params: StoreSave.Parameters
    }

    private let pool: DatabasePool

    /// The queue in the file open in `pool`.
    init(pool: DatabasePool) { self.pool = pool }

    /// Queues `params` after the saves already queued, durably, with `objects` (the context's
    /// objects as the save leaves them) and without `removed`, in the same transaction.
    @discardableResult
    func enqueue(_ params: StoreSave.Parameters, objects: [DepotObject], removing removed: [String])
        throws(DepotClientError) -> Int64
    {
        let text = try ContextReplicaFile.text(params)
        return try write { db in
            try db.execute(sql: "INSERT INTO context_pending_save (params) VALUES (?)", arguments: [text])
            let number = db.lastInsertedRowID
            try ContextReplicaFile.write(objects, removing: removed, in: db)
            return number
        }
    }

    /// The queued saves, oldest first.
    func pending() throws(DepotClientError) -> [Pending] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT number, params FROM context_pending_save ORDER BY number").map { row in
                Pending(number: row["number"], params: try ContextReplicaFile.decode(row["params"]))
            }
        }
    }

    /// Removes the save `number` from the queue (it committed) and rewrites the saves after it
    /// (`rewritten`: the permanent ids and new versions it produced), in one transaction.
    func complete(_ number: Int64, rewriting rewritten: [Pending]) throws(DepotClientError) {
        let texts = try rewritten.map { pending throws(DepotClientError) in
            (pending.number, try ContextReplicaFile.text(pending.params))
        }
        try write { db in
            try db.execute(sql: "DELETE FROM context_pending_save WHERE number = ?", arguments: [number])
            for (number, text) in texts {
                try db.execute(
                    sql: "UPDATE context_pending_save SET params = ? WHERE number = ?", arguments: [text, number])
            }
        }
    }

    /// Moves the save `number` from the queue to the failed saves, with `error`.
    func fail(_ pending: Pending, error: RPCError) throws(DepotClientError) {
        let params = try ContextReplicaFile.text(pending.params)
        let error = try ContextReplicaFile.text(error)
        try write { db in
            try db.execute(sql: "DELETE FROM context_pending_save WHERE number = ?", arguments: [pending.number])
            try db.execute(
                sql: "INSERT OR REPLACE INTO context_failed_save (number, params, error) VALUES (?, ?, ?)",
                arguments: [pending.number, params, error])
        }
    }

    /// The failed replays not dismissed yet, oldest first.
    func failed() throws(DepotClientError) -> [FailedSave] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT number, params, error FROM context_failed_save ORDER BY number").map {
                row in
                FailedSave(
                    number: row["number"], change: try ContextReplicaFile.decode(row["params"]),
                    error: try ContextReplicaFile.decode(row["error"]))
            }
        }
    }

    /// Forgets the failed save `number`.
    func dismissFailure(_ number: Int64) throws(DepotClientError) {
        try write { db in
            try db.execute(sql: "DELETE FROM context_failed_save WHERE number = ?", arguments: [number])
        }
    }

    private func read<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        try pool.readReplica(body)
    }

    private func write<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        try pool.writeReplica(body)
    }
}
