import DepotProtocol
import GRDB
import Synchronization

/// The store's commits, in commit order: every transaction its writes
/// committed (saves, each save of a group commit, batches) and every one it
/// applied from a cluster's log, as one stream (``Store/takeCommittedTransactions()``).
///
/// A write hands its transaction over with ``expect(_:in:)`` while its SQLite
/// transaction is still open, once nothing of it can be rolled back but the
/// transaction as a whole; the transaction joins the stream only if SQLite
/// then commits, in the order SQLite commits. A rolled-back transaction (a
/// group commit that failed, a cluster write whose log entry was refused and
/// that runs again) leaves nothing behind, so no caller has to forget what it
/// reported. It is a GRDB ``TransactionObserver`` of the writer connection that
/// observes no row events: it only hears commits and rollbacks.
///
/// Guarded: `pending` and `committed` each by their own `Mutex`. `pending` is
/// touched only on the writer connection, so its lock is never contended; the
/// writer's thread and whoever takes the stream meet at `committed`.
final class CommitStream: TransactionObserver, Sendable {
    /// Transactions expected in the writer's open SQLite transaction.
    private let pending = Mutex<[CommittedTransaction]>([])
    /// Committed and not yet taken.
    private let committed = Mutex<[CommittedTransaction]>([])
    /// How many transactions were ever expected: a write that raised it recorded one.
    private let expectedCount = Atomic<Int>(0)
    /// The entities whose changed rows' values a transaction carries (``Store/captureRowImages(of:)``).
    let imagedEntities = Mutex<Set<String>>([])

    /// Adds `transaction` to the stream if `db`'s current SQLite transaction commits.
    ///
    /// Call it on the writer connection, inside the transaction, after the
    /// work that recorded `transaction` can no longer be rolled back alone
    /// (after its savepoint was released).
    func expect(_ transaction: CommittedTransaction, in db: Database) {
        precondition(db.isInsideTransaction, "transaction \(transaction.number) expected outside a transaction")
        pending.withLock { $0.append(transaction) }
        expectedCount.add(1, ordering: .relaxed)
    }

    /// How many transactions were expected so far (committed or not).
    var expectations: Int { expectedCount.load(ordering: .relaxed) }

    /// The committed transactions not taken yet, in commit order; they leave the stream.
    func take() -> [CommittedTransaction] {
        committed.withLock { list in
            defer { list = [] }
            return list
        }
    }

    // MARK: TransactionObserver

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }

    func databaseDidChange(with event: DatabaseEvent) {}

    func databaseDidCommit(_ db: Database) {
        let done = pending.withLock { list in
            defer { list = [] }
            return list
        }
        guard !done.isEmpty else { return }
        committed.withLock { $0 += done }
    }

    func databaseDidRollback(_ db: Database) {
        pending.withLock { $0 = [] }
    }
}

extension Store {
    /// What committed since the last call, in commit order: this store's own
    /// writes and what it applied of a cluster's log. The writer takes it after
    /// each write and publishes it (deltas, `store/didSave`).
    public func takeCommittedTransactions() -> [CommittedTransaction] { commits.take() }

    /// How many transactions writes have recorded so far: a write that raised
    /// it committed one, unless its SQLite transaction then rolled back.
    public var recordedTransactions: Int { commits.expectations }

    /// Makes every transaction this store's writes commit from now on carry the values, right after
    /// it, of its changed rows of `entities` (``CommittedTransaction/images``): the fetched-results
    /// engine computes deltas from them without reading the store again (issue 34).
    public func captureRowImages(of entities: Set<String>) {
        commits.imagedEntities.withLock { $0 = entities }
    }

    /// The most changed rows whose images a transaction carries: a larger one (a big batch) carries
    /// none, and publishing it reads the store as before.
    public static let largestImagedTransaction = 10_000

    /// Runs `body` as a write (in `group`'s savepoint, or in a transaction of
    /// its own) whose recorded transaction joins the commit stream once it commits.
    func reportingWrite<R>(
        in group: WriteGroup? = nil, _ body: (Database) throws -> (R, CommittedTransaction?)
    ) throws(RPCError) -> (R, CommittedTransaction?) {
        guard let group else {
            return try write { db in
                var outcome = try body(db)
                if let transaction = outcome.1 {
                    outcome.1 = try withImages(transaction, db)
                    commits.expect(outcome.1!, in: db)
                }
                return outcome
            }
        }
        // Expected only once the savepoint is released: a savepoint rolled back reports nothing.
        var outcome = try write(in: group, body)
        if let transaction = outcome.1 {
            // The state right after this save, before the group's next one changes it.
            outcome.1 = try Self.mapErrors { try withImages(transaction, group.db) }
            commits.expect(outcome.1!, in: group.db)
        }
        return outcome
    }

    /// `transaction` with the images of its changed rows of the entities ``captureRowImages(of:)``
    /// named, read on the writer's connection `db` (the pages it just wrote) under `schema` (the
    /// store's, unless a replica's catch-up migrated it in the same transaction).
    func withImages(_ transaction: CommittedTransaction, _ db: Database, schema: Schema? = nil) throws
        -> CommittedTransaction
    {
        let entities = commits.imagedEntities.withLock { $0 }
        guard !entities.isEmpty else { return transaction }
        let wanted = transaction.changes.filter { entities.contains($0.key) }
        guard !wanted.isEmpty,
            wanted.values.reduce(0, { $0 + $1.inserted.count + $1.updated.count }) <= Self.largestImagedTransaction
        else { return transaction }
        let schema = schema ?? self.schema
        var transaction = transaction
        for (name, changes) in wanted {
            guard let entity = schema.entity(named: name) else { continue }
            let shape = try ObjectShape(entity: entity, properties: nil)
            let ids = changes.inserted + changes.updated.map(\.row)
            transaction.images[name] =
                ids.isEmpty ? [:] : try Self.evaluationRows(db, shape: shape, schema: schema, ids: ids)
        }
        return transaction
    }
}
