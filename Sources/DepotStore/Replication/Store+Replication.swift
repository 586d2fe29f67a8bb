import DepotProtocol
import Foundation
import GRDB

/// A store in a cluster (DESIGN.md section 11) is a replica: every write
/// commits to the cluster's log before it commits here, and what other
/// stores commit is applied from the log, in the log's order, so every
/// replica passes through the same states in the same order and computes
/// the same deltas (docs/cluster.md).
extension Store {
    /// The most log entries one catch-up applies in one local transaction.
    static let catchUpBatch = 256

    /// The most times one write rebuilds the replica (it found it diverged under the write lock)
    /// before it fails with the divergence.
    static let rebuildsPerWrite = 2

    /// Whether writes go through a cluster's log.
    public var isReplicated: Bool { replication != nil }

    /// Why this replica can no longer follow the cluster's log, if it cannot (a changeset that
    /// does not apply, a hole in the log): every write and catch-up is then refused with it.
    public var divergenceError: RPCError? { divergence.withLock { $0 } }

    /// The number of the cluster's newest entry this replica has applied (0 for a lone store).
    public var replicaPosition: Int64 { clusterPosition.withLock { $0 } }

    /// Applies what other stores committed since this store last looked
    /// (on the writer, between writes); the commit stream (``takeCommittedTransactions()``) then has it.
    public func catchUpWithCluster() throws(RPCError) {
        guard let replication else { return }
        try repairIfDiverged()
        var limit = Self.catchUpBatch
        while true {
            let position = clusterPosition.withLock { $0 }
            let entries = try replication.entries(after: position, limit: limit)
            guard !entries.isEmpty else { return }
            let cutGroup = try apply(entries)
            // A read that cut a group ends where the group starts: read again from there, with
            // room for the whole group should it not fit at all.
            if !cutGroup && entries.count < limit { return }
            if clusterPosition.withLock({ $0 }) == position { limit *= 2 }
        }
    }

    /// `body` as one cluster transaction, committed to the log before it commits here.
    ///
    /// It runs first from where the replica is, without the cluster's write
    /// lock: one round trip when no other store committed since. If one did,
    /// the log refuses the entry (its number is taken), the write rolls back
    /// here and runs again under the lock, after applying what it missed, and
    /// then the log cannot refuse it (docs/cluster.md). A first try that fails
    /// is run again under the lock too, since a stale replica may explain it. The local transaction
    /// commits only once the log has the entry: a replica never holds what the
    /// cluster does not. If the log's commit fails, the local write rolls back,
    /// and should the entry have made it after all, the next catch-up applies
    /// it like anyone else's.
    func replicatedWrite<T>(
        _ replication: any StoreReplication, model: ModelChange? = nil, _ body: (Database) throws -> T
    ) throws(RPCError) -> T {
        do {
            if let value = try attemptWrite(replication, locked: false, model: model, body) { return value }
        } catch .atCommit(let error) {
            // Whether the entry made it is unknown: running the write again could apply it twice.
            throw error
        } catch .beforeCommit(let error) where error.code == .requestCancelled || error.code == .serverCancelled {
            throw error
        } catch {
            // A replica behind the log may be why (an entity, an object or a value it has not seen
            // yet): the write under the lock, after catching up, gives the answer that counts.
        }
        var value: T?
        var rebuilds = 0
        while true {
            do {
                value = try attemptWrite(replication, locked: true, model: model, body)
                break
            } catch .beforeCommit where divergence.withLock({ $0 }) != nil && rebuilds < Self.rebuildsPerWrite {
                // What it missed showed the replica diverged. The try released the write lock; the
                // next rebuilds the replica first, without the lock (a snapshot takes the store's
                // size, and every writer of the cluster would wait on it), then takes it again.
                rebuilds += 1
            } catch {
                switch error {
                case .atCommit(let error), .beforeCommit(let error): throw error
                }
            }
        }
        guard let value else { throw .internalError("the cluster's log refused a write made under its lock") }
        return value
    }

    /// One try of ``replicatedWrite(_:model:_:)``; `nil` when the log refused the entry.
    private func attemptWrite<T>(
        _ replication: any StoreReplication, locked: Bool, model: ModelChange?, _ body: (Database) throws -> T
    ) throws(AttemptFailure) -> T? {
        do {
            try repairIfDiverged()
        } catch {
            throw .atCommit(error)
        }
        var open = true
        defer { if open { replication.abandonWrite() } }
        do {
            let pending = try replication.beginWrite(after: clusterPosition.withLock { $0 }, locked: locked)
            // Never rebuilt here: the write lock may be held (see replicatedWrite).
            if !pending.isEmpty { try apply(pending, repairing: false) }
        } catch {
            throw .beforeCommit(error)
        }
        let head = clusterPosition.withLock { $0 }
        var committed = false
        var newPosition = head
        do {
            let value = try pool.write { db in
                let session = model == nil ? try ChangeSession(on: db.sqliteConnection!) : nil
                let latest = try Self.latestTransaction(db)
                let value = try body(db)
                let (entries, tables) = try entries(
                    db, after: head, latest: latest, session: session, model: model)
                guard let last = entries.last else {
                    open = false
                    replication.abandonWrite()
                    // Nothing to append is an answer only if the replica was at the head: a value
                    // "unchanged" here may have been changed by another daemon meanwhile.
                    if !locked, try !replication.entries(after: head, limit: 1).isEmpty { throw LogRefusedEntry() }
                    return value
                }
                try Self.saveClusterPosition(db, last.number)
                newPosition = last.number
                open = false
                let appended: Bool
                do {
                    appended = try replication.commitWrite(entries, tables: tables)
                } catch {
                    throw AttemptFailure.atCommit(Self.rpcError(error))
                }
                // Refused: roll this write back.
                guard appended else { throw LogRefusedEntry() }
                committed = true
                return value
            }
            if committed { clusterPosition.withLock { $0 = newPosition } }
            return value
        } catch is LogRefusedEntry {
            return nil
        } catch let failure as AttemptFailure {
            throw failure
        } catch {
            // The log has the entry but the local commit failed: never run it again (the next
            // catch-up applies the entry); the client learns its outcome from there.
            if committed { throw .atCommit(Self.rpcError(error)) }
            throw .beforeCommit(Self.rpcError(error))
        }
    }

    /// The log entries of the write just run: its model change, or one per history row it
    /// recorded (a group commit records several), the changeset on the last, the others marked
    /// as continued; none when it changed nothing. With them, what the write left in the object
    /// tables (everything, for a model change).
    private func entries(
        _ db: Database, after head: Int64, latest: Int64, session: ChangeSession?, model: ModelChange?
    ) throws -> (entries: [ReplicatedEntry], tables: ObjectTablesChange?) {
        let offset = try Self.storedChecksum(db)?.offset ?? 0
        if let model {
            guard model.changed else { return ([], nil) }
            let checksum = try ReplicaChecksum.full(db)
            try Self.saveChecksum(db, checksum)
            // A migration's history row (``Store/defineModel(_:removing:)``) gives the entry its
            // number and timestamp, which every replica records as it is.
            let timestamp =
                try model.transaction.flatMap {
                    try Double.fetchOne(
                        db, sql: "SELECT timestamp FROM depot_transaction WHERE id = ?", arguments: [$0])
                } ?? Date.now.timeIntervalSince1970
            let entry = ReplicatedEntry(
                number: head + 1, author: nil, timestamp: timestamp,
                content: .model(entities: model.entities, removing: model.removing, transaction: model.transaction),
                checksum: Int64(bitPattern: checksum ^ offset))
            return ([entry], try ObjectTablesChange.everything(db, schema: ModelMigrator.loadSchema(db)))
        }
        let changeset = try session?.changeset() ?? []
        let rows = try Row.fetchAll(
            db, sql: "SELECT id, timestamp, author, changes FROM depot_transaction WHERE id > ? ORDER BY id",
            arguments: [latest])
        // History retention must not have pruned the write's own rows (a group crossing a prune).
        guard Int64(rows.count) == (try Self.latestTransaction(db)) - latest else {
            throw RPCError.internalError(
                "history retention removed transactions of the write that recorded them: keep more history (--history-retention)"
            )
        }
        guard !rows.isEmpty else {
            // A write that changed objects without a transaction would leave the replicas apart.
            guard changeset.isEmpty else {
                throw RPCError.internalError("a write changed objects but recorded no transaction")
            }
            return ([], nil)
        }
        // The changeset is read once, for the object tables and the checksum.
        let changedRows = try ChangeSession.changedRows(changeset)
        let tables = try ObjectTablesChange.rows(db, changedRows: changedRows)
        let checksum = try (Self.storedChecksum(db)?.checksum ?? 0) ^ ReplicaChecksum.delta(db, rows: changedRows)
        try Self.saveChecksum(db, checksum)
        let entries = rows.enumerated().map { index, row in
            let isLast = index == rows.count - 1
            return ReplicatedEntry(
                number: head + 1 + Int64(index), author: row["author"], timestamp: row["timestamp"],
                content: .data(
                    transaction: row["id"], changes: row["changes"], changeset: isLast ? changeset : [],
                    continued: !isLast),
                checksum: isLast ? Int64(bitPattern: checksum ^ offset) : nil)
        }
        return (entries, tables)
    }

    /// Applies `entries` (the log's, in order, from right after this replica's position) in one
    /// local transaction; returns whether it left out a group cut at the end.
    ///
    /// - Parameter repairing: whether a replica found diverged rebuilds itself at once; if not
    ///   (the caller may hold the cluster's write lock), it records the divergence and throws it,
    ///   and the next ``repairIfDiverged()`` rebuilds it.
    @discardableResult
    private func apply(_ entries: [ReplicatedEntry], repairing: Bool = true) throws(RPCError) -> Bool {
        var schema = self.schema
        var position = clusterPosition.withLock { $0 }
        // A group's entries are applied together: an incomplete group at the end waits for the next read.
        var complete = entries
        while let last = complete.last, case .data(_, _, _, continued: true) = last.content { complete.removeLast() }
        let cutGroup = complete.count < entries.count
        guard !complete.isEmpty else { return cutGroup }
        if let refusal = divergence.withLock({ $0 }) {
            guard repairing else { throw refusal }
            // A rebuild failed before: try again; the entries are read again from its position.
            try repairIfDiverged()
            return false
        }
        do {
            try pool.write { db in
                let stored = try Self.storedChecksum(db) ?? (ReplicaChecksum.full(db), 0)
                var checksum = stored.checksum
                let offset = stored.offset
                for entry in complete where entry.number > position {
                    guard entry.number == position + 1 else {
                        // The log has no holes: the entries after this replica's position were pruned.
                        throw ReplicationError.pruned(
                            "the cluster's log was pruned past this replica (it is at \(position), the log resumes at \(entry.number))"
                        )
                    }
                    switch entry.content {
                    case .data(let transaction, let changes, let changeset, let continued):
                        let expected = try Self.latestTransaction(db) + 1
                        guard transaction == expected else {
                            throw ReplicationError.diverged(
                                "the cluster's entry \(entry.number) is transaction \(transaction), this replica expected \(expected)"
                            )
                        }
                        try ChangeSession.apply(changeset, on: db.sqliteConnection!)
                        checksum ^= try ReplicaChecksum.delta(db, changeset: changeset)
                        _ = try HistoryLog.insert(
                            db, number: transaction, timestamp: entry.timestamp, author: entry.author, text: changes,
                            retention: historyRetention)
                        var committed = CommittedTransaction(
                            number: transaction, author: entry.author, timestamp: entry.timestamp,
                            changes: try HistoryCoding.decode(changes))
                        // The rows as the committing daemon's lane saw them, read right after the
                        // entry's changeset, so that the lane reads nothing more. A group's continued
                        // entries carry no changeset (the last carries the group's): the rows are not
                        // yet at their state and they get none, publishing them reads the store.
                        if !continued { committed = try withImages(committed, db, schema: schema) }
                        commits.expect(committed, in: db)
                    case .model(let entities, let removing, let transaction):
                        (schema, _) = try ModelMigrator.migrate(db, from: schema, to: entities, removing: removing)
                        checksum = try ReplicaChecksum.full(db)
                        // A numbered migration is a transaction here too: its history row (no object
                        // changes) and its place in the commit stream, where the lane follows the model.
                        if let transaction {
                            try recordMigration(db, transaction: transaction, entry: entry)
                        }
                    }
                    if let expected = entry.checksum, UInt64(bitPattern: expected) != checksum ^ offset {
                        throw ReplicationError.diverged(
                            "after the cluster's entry \(entry.number) this replica's checksum is \(checksum ^ offset), the log's \(UInt64(bitPattern: expected))"
                        )
                    }
                    position = entry.number
                }
                try Self.saveClusterPosition(db, position)
                try Self.saveChecksum(db, checksum)
            }
        } catch ReplicationError.transient(let message) {
            throw .internalError(message)
        } catch let error as ReplicationError {
            // Nothing of the batch stays, and the replica cannot follow the log from where it is:
            // it rebuilds itself from the cluster's snapshot (docs/cluster.md). Should that fail
            // (PostgreSQL away), it refuses every write and catch-up until a catch-up rebuilds it.
            let refusal = RPCError.internalError(
                "this replica cannot follow the cluster's log (\(error)) and is rebuilding itself from the cluster's snapshot"
            )
            divergence.withLock { $0 = refusal }
            guard repairing else {
                // Known wrong from now on: no read until the rebuild commits.
                rebuilding.store(true, ordering: .releasing)
                throw refusal
            }
            try rebuildFromCluster(because: error.description)
            return false
        } catch {
            throw Self.rpcError(error)
        }
        replaceSchema(schema)
        clusterPosition.withLock { $0 = position }
        return cutGroup
    }

    /// Records the migration the log's `entry` numbered `transaction`, as the daemon that made it
    /// did: a history row with no object changes, and the transaction in the commit stream.
    private func recordMigration(_ db: Database, transaction: Int64, entry: ReplicatedEntry) throws {
        let expected = try Self.latestTransaction(db) + 1
        guard transaction == expected else {
            throw ReplicationError.diverged(
                "the cluster's entry \(entry.number) is transaction \(transaction), this replica expected \(expected)")
        }
        commits.expect(
            try HistoryLog.recordMigration(
                db, number: transaction, timestamp: entry.timestamp, author: entry.author, retention: historyRetention),
            in: db)
    }

    /// The replica's position in the cluster's log (0 for a new replica or a lone store).
    ///
    /// A data directory is a lone store or a cluster's replica for life: a lone store's objects
    /// are in no log, and a replica's writes would be lost to the cluster without one.
    static func openClusterPosition(_ db: Database, replicated: Bool) throws -> Int64 {
        let stored = try Int64.fetchOne(
            db, sql: "SELECT CAST(value AS INTEGER) FROM depot_meta WHERE key = 'clusterPosition'")
        switch (stored, replicated) {
        case (let position?, true):
            return position
        case (nil, true):
            let isEmpty =
                try latestTransaction(db) == 0
                && Int.fetchOne(db, sql: "SELECT count(*) FROM depot_meta WHERE key = 'model'") == 0
            guard isEmpty else {
                throw RPCError.invalidParams(
                    "this data directory holds a store of its own, which is not in the cluster's log: give the cluster's daemon an empty --data-dir",
                    field: "store")
            }
            try saveClusterPosition(db, 0)
            return 0
        case (_?, false):
            throw RPCError.invalidParams(
                "this data directory is a replica of a cluster: start it with the cluster's --store postgresql://…",
                field: "store")
        case (nil, false):
            return 0
        }
    }

    static func saveClusterPosition(_ db: Database, _ position: Int64) throws {
        try db.executeCached(
            sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('clusterPosition', ?)",
            arguments: [String(position)])
    }
}

/// The log refused a write's entry: another store took its number first.
private struct LogRefusedEntry: Error {}

/// How a try of a replicated write failed: before its entry went to the log (it may be run again),
/// or while it did (whether the entry made it is unknown).
private enum AttemptFailure: Error {
    case beforeCommit(RPCError)
    case atCommit(RPCError)
}

/// A `model/define` as a cluster transaction: what was asked, and whether it changed the model.
final class ModelChange {
    let entities: [EntityDescription]
    let removing: [String]
    /// Set by the write once it migrated.
    var changed = false
    /// The migration's history number, set by the write when it recorded one (a migration of a
    /// defined model is a transaction; the first definition of an empty cluster is not).
    var transaction: Int64?

    init(entities: [EntityDescription], removing: [String]) {
        self.entities = entities
        self.removing = removing
    }
}
