import DepotProtocol

/// Where a store's writes meet those of the other stores of a cluster
/// (DESIGN.md section 11): one log of every committed transaction, in one
/// order, that each store writes through and follows.
///
/// The store calls it on its writer only, one write at a time:
/// ``beginWrite(after:locked:)``, then exactly one of ``commitWrite(_:)``
/// (the write appends its entry, committed at once) or ``abandonWrite()``
/// (nothing to append, or the write failed). Between writes,
/// ``entries(after:limit:)`` reads what other stores committed.
public protocol StoreReplication: AnyObject, Sendable {
    /// Begins a write. Unlocked, it only says nothing is known to be missing
    /// (an empty list, no round trip): the entry may then be refused. Locked,
    /// it takes the cluster's write lock and returns the entries committed
    /// after `position`, in order; the write's entry, numbered after them,
    /// cannot be refused.
    func beginWrite(after position: Int64, locked: Bool) throws(RPCError) -> [ReplicatedEntry]

    /// Appends `entries` (consecutive numbers), all or none, if the log's
    /// newest entry is the one before the first, and releases the lock if
    /// held; returns whether they were appended (`false`: another store took
    /// the number first). When it throws, they are not known to be committed:
    /// the store rolls back its own write, and learns from the log later
    /// whether they made it. `tables` is what the write left in the object
    /// tables, for a log that keeps the objects as tables and writes them with
    /// the entries (others ignore it); `nil` when it tells nothing.
    func commitWrite(_ entries: [ReplicatedEntry], tables: ObjectTablesChange?) throws(RPCError) -> Bool

    /// Ends a write that appends nothing, releasing the lock.
    func abandonWrite()

    /// Up to `limit` committed entries numbered after `position`, in order (no lock).
    func entries(after position: Int64, limit: Int) throws(RPCError) -> [ReplicatedEntry]

    /// Starts following the log: `newEntries` is called, from any thread,
    /// whenever entries beyond `position()` (what the store has applied)
    /// may have been committed (a hint: the store then reads them with
    /// ``entries(after:limit:)``), and after every reconnection.
    func startFollowing(position: @escaping @Sendable () -> Int64, _ newEntries: @escaping @Sendable () -> Void)

    /// Reads the cluster's objects at one position in one snapshot, for a replica to start from:
    /// `begin` gets the position, model, ids and checksum, then `rows` gets every object table's
    /// rows, a batch at a time, while the snapshot stays open; memory holds a batch or two (the
    /// next may be read while `rows` stores one). Returns false, calling neither, when the cluster
    /// keeps no snapshot (a new replica then replays the log). Called on the store's writer,
    /// inside its transaction.
    func readSnapshot(
        begin: (ReplicaSnapshot) throws -> Void, rows: (_ table: String, _ batch: ReplicaSnapshot.Batch) throws -> Void
    ) throws -> Bool

    /// Stops following and closes the connections.
    func stop()
}

/// One committed transaction of the cluster as its log holds it.
public struct ReplicatedEntry: Sendable, Equatable {
    /// What the transaction did.
    public enum Content: Sendable, Equatable {
        /// Object changes: the transaction's number (in history and `store/didSave`, numbered
        /// like a lone store's, without the model changes), its changes in history's form
        /// (``HistoryCoding``), and the SQLite changeset that brings a replica's rows to the
        /// committed state. The saves of one group commit are one entry each, in one log
        /// transaction: all but the last are `continued` and carry no changeset, the last
        /// carries the group's; a replica applies the group together.
        case data(transaction: Int64, changes: String, changeset: [UInt8], continued: Bool = false)
        /// A model change (`model/define`), which each replica migrates to itself. A migration of a
        /// defined model is a transaction (DESIGN.md §7, Across a migration): `transaction` is its
        /// number in history (a row with no object changes), `nil` for the first definition of an
        /// empty cluster and for entries written before migrations were numbered.
        case model(entities: [EntityDescription], removing: [String], transaction: Int64? = nil)
    }

    /// Its number in the cluster's log: the order every replica applies entries in.
    public var number: Int64
    /// Who made it (the client's author), if anyone said.
    public var author: String?
    /// When it committed, seconds since 1970.
    public var timestamp: Double
    /// What it did.
    public var content: Content
    /// The checksum of the objects the entry leaves (``ReplicaChecksum``, as a bit pattern), on the
    /// last entry of a write; `nil` on the others, and on entries written before checksums.
    public var checksum: Int64?

    /// An entry.
    public init(number: Int64, author: String?, timestamp: Double, content: Content, checksum: Int64? = nil) {
        self.number = number
        self.author = author
        self.timestamp = timestamp
        self.content = content
        self.checksum = checksum
    }
}

/// Why a replicated write or catch-up failed inside the store.
enum ReplicationError: Error, CustomStringConvertible {
    /// SQLite's session extension refused (see the message).
    case changeset(String)
    /// The log and this replica disagree (see the message).
    case diverged(String)
    /// Applying failed for a reason that may pass (disk full, I/O): not a divergence.
    case transient(String)
    /// The log no longer holds the entries that follow this replica's position (see the message).
    case pruned(String)

    var description: String {
        switch self {
        case .changeset(let message), .diverged(let message), .transient(let message), .pruned(let message): message
        }
    }
}
