import DepotProtocol
import Foundation
import GRDB
import Synchronization

/// The object store: a model, objects in SQLite, fetches, saves and history.
///
/// One `Store` owns one database file through a GRDB `DatabasePool` in WAL mode:
/// writes are serialized on the pool's single writer, reads run concurrently on
/// its readers and see committed snapshots, so a long write never blocks a read.
/// Every method is synchronous and may block: call it from a worker thread,
/// never from the transport loop.
public final class Store: Sendable {
    /// The underlying pool; exposed for tests and for the fetched-results engine's reads.
    public let pool: DatabasePool
    private let currentSchema: Mutex<Schema>
    /// Each reader connection's watchdog, by connection.
    private let watchdogs: StatementWatchdogs
    /// How long history keeps transactions.
    public let historyRetention: HistoryRetention
    /// The read transaction every read of a snapshot store runs in (``readLatestCommit(_:)``).
    let snapshot: SnapshotConnection?
    /// The cluster this store is a replica in, if any (DESIGN.md section 11); `nil` for a lone store.
    public let replication: (any StoreReplication)?
    /// What the replica has applied of the cluster's log: its last entry's number.
    let clusterPosition: Mutex<Int64>
    /// What the writes committed, and what the replica applied, in commit order (``takeCommittedTransactions()``).
    let commits: CommitStream
    /// Copies the WAL back into the file off the writer's path (``WALCheckpointer``).
    let checkpointer: WALCheckpointer
    /// Set once the replica cannot follow the log (``divergenceError``).
    let divergence = Mutex<RPCError?>(nil)
    /// Set while the replica rebuilds itself from the cluster's snapshot: reads are refused meanwhile.
    let rebuilding = Atomic<Bool>(false)
    /// Set when the replica rebuilt itself, until ``takeRebuild()``: its subscribers must resync.
    let rebuilt = Atomic<Bool>(false)
    /// The save's statements, prepared on the writer's connection by entity and shape.
    let saveStatements = SaveStatements()
    /// Whether batch inserts take the typed path where it applies (``BatchRows``):
    /// tests turn it off to compare it with the generic path.
    let typedBatchInsert = Atomic<Bool>(true)
    /// The keys whose values history records by entity (``recordScopeValues(of:)``), the
    /// model version their capture was installed for (`nil`: to install before the next write),
    /// and what was installed (the keys captured by entity, as ``ScopeCapture`` reads them).
    /// The data format this store was upgraded from as it opened (``StoreFormat``), `nil` when none.
    public let upgradedFromFormat: Int?
    let scopeRecording = Mutex<(keys: [String: [String]], installed: Int64?, captured: [String: [String]])>(
        ([:], nil, [:]))

    /// Opens (creating if needed) the store at `path`, keeping history per `historyRetention`.
    ///
    /// - Parameter queryTimeLimit: seconds a read may run without producing a row before it is
    ///   stopped with -32602 (a SUBQUERY or predicate that would run away).
    /// - Parameter replication: the cluster whose log every write goes through
    ///   and the store follows; the file at `path` is then this daemon's replica.
    public init(
        path: String, historyRetention: HistoryRetention = .count(100_000), queryTimeLimit: Double = 30,
        replication: (any StoreReplication)? = nil
    ) throws(RPCError) {
        self.historyRetention = historyRetention
        self.replication = replication
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        // Four for reads, and the publish lane's own four (`PublishLane.readerBudget`).
        configuration.maximumReaderCount = 8
        let watchdogs = StatementWatchdogs()
        self.watchdogs = watchdogs
        let commits = CommitStream()
        self.commits = commits
        let checkpointer = WALCheckpointer(path: path)
        self.checkpointer = checkpointer
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            if !db.configuration.readonly { try checkpointer.install(on: db) }
            PredicateCompilation.registerFunctions(in: db)
            if db.configuration.readonly, let connection = db.sqliteConnection {
                watchdogs.register(StatementWatchdog.install(on: db, limit: queryTimeLimit), for: connection)
            }
        }
        do {
            try StoreFormat.refuseNewer(path: path)
            pool = try DatabasePool(path: path, configuration: configuration)
            pool.add(transactionObserver: commits, extent: .databaseLifetime)
            let (schema, position, upgraded) = try pool.write { db in
                let upgraded = try StoreFormat.prepare(db, path: path)
                try Self.createMetaTables(db)
                try Self.createResultsCacheTable(db)
                return (
                    try ModelMigrator.loadSchema(db), try Self.openClusterPosition(db, replicated: replication != nil),
                    upgraded
                )
            }
            upgradedFromFormat = upgraded
            currentSchema = Mutex(schema)
            clusterPosition = Mutex(position)
            snapshot = nil
        } catch let error as RPCError {
            throw error
        } catch {
            throw .internalError("could not open the store at \(path): \(error)")
        }
        // A new replica starts from the cluster's snapshot if it has one (the store's size, not its
        // history), then where the cluster is, in batches, before its first write takes the lock.
        let joined = try bootstrapFromCluster()
        // A replica just filled from the snapshot kept its checksum from the rows it inserted:
        // reading them all back would be the second pass the load avoids.
        if replication != nil, !joined { try verifyChecksum() }
        try catchUpWithCluster()
    }

    /// A store whose every read runs in the read transaction of `db`.
    private init(snapshotOf store: Store, schema: Schema, db: Database) {
        pool = store.pool
        currentSchema = Mutex(schema)
        watchdogs = store.watchdogs
        historyRetention = store.historyRetention
        snapshot = SnapshotConnection(db: db)
        commits = store.commits
        // Shared, like the pool: its writer's WAL hook points at it.
        checkpointer = store.checkpointer
        replication = nil
        clusterPosition = Mutex(0)
        upgradedFromFormat = nil
    }

    /// Hands `body`, on a reader and concurrently with later writes, a store
    /// whose reads all see exactly the state the writes so far left: the
    /// results engine computes a commit's deltas from it while the writer
    /// goes on with the next commit.
    ///
    /// Call it on the queue that runs every write, between writes: the
    /// snapshot is the state as of the call. It blocks until a reader has
    /// taken the snapshot (waiting for a free reader, which bounds how far
    /// publishing can fall behind). The store handed out reads only, and only
    /// inside `body`.
    public func readLatestCommit(_ body: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
        precondition(snapshot == nil, "a snapshot store cannot take another snapshot")
        // The model as of the snapshot: a model change may commit before the reader starts.
        let schema = schema
        pool.writeWithoutTransaction { _ in
            pool.asyncConcurrentRead { [self] result in
                switch result {
                case .success(let db): body(.success(Store(snapshotOf: self, schema: schema, db: db)))
                case .failure(let error): body(.failure(Self.rpcError(error)))
                }
            }
        }
    }

    /// The current model.
    public var schema: Schema { currentSchema.withLock { $0 } }

    func replaceSchema(_ schema: Schema) {
        let previous = currentSchema.withLock { current in
            defer { current = schema }
            return current.version
        }
        // A migration dropped history's capture triggers (``ScopeCapture``): installed again before the next write.
        if previous != schema.version { scopeRecording.withLock { $0.installed = nil } }
    }

    private static func createMetaTables(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS depot_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS depot_transaction (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    timestamp REAL NOT NULL,
                    author TEXT,
                    changes TEXT NOT NULL,
                    bytes INTEGER);
                """)
        try SaveIdLog.createTable(db)
        // Stores made before history counted its bytes.
        let columns = try db.columns(in: "depot_transaction").map(\.name)
        if !columns.contains("bytes") {
            try db.execute(sql: "ALTER TABLE depot_transaction ADD COLUMN bytes INTEGER")
        }
    }

    /// The newest committed transaction's number (0 before any).
    public func latestTransaction() throws(RPCError) -> Int64 {
        try read { db in try Self.latestTransaction(db) }
    }

    static func latestTransaction(_ db: Database) throws -> Int64 {
        try Int64.fetchOneCached(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'depot_transaction'") ?? 0
    }

    /// Runs `body` in a read-only snapshot, mapping errors to ``RPCError``.
    public func read<T>(_ body: (Database) throws -> T) throws(RPCError) -> T {
        if let snapshot { return try Self.mapErrors { try watched(snapshot.db, body) } }
        // A replica being rebuilt holds a state the cluster left behind: no read is served from it.
        if rebuilding.load(ordering: .acquiring) {
            throw .internalError(
                "this daemon's replica is rebuilding itself from the cluster's snapshot: try again in a moment")
        }
        return try Self.mapErrors { try pool.read { db in try watched(db, body) } }
    }

    /// Runs `body` on reader `db` with its watchdog armed: a statement that
    /// produces no row for the time limit is stopped with -32602.
    private func watched<T>(_ db: Database, _ body: (Database) throws -> T) throws -> T {
        guard let watchdog = watchdog(of: db) else { return try body(db) }
        watchdog.arm()
        defer { watchdog.disarm() }
        do {
            return try body(db)
        } catch let error as DatabaseError where error.resultCode == .SQLITE_INTERRUPT && watchdog.tripped {
            throw RPCError.invalidParams(
                "the query ran \(Int(watchdog.limit)) s without producing a row and was stopped (a SUBQUERY or predicate that runs away?): narrow the predicate",
                field: "predicate")
        }
    }

    /// The watchdog of reader connection `db`, if it has one.
    func watchdog(of db: Database) -> StatementWatchdog? {
        db.sqliteConnection.flatMap { watchdogs.watchdog(for: $0) }
    }

    /// Runs `body` as the single writer, in one transaction, mapping errors to ``RPCError``.
    ///
    /// In a cluster the write goes through its log (``replicatedWrite(_:)``).
    public func write<T>(_ body: (Database) throws -> T) throws(RPCError) -> T {
        precondition(snapshot == nil, "a snapshot store does not write")
        let captured = try prepareScopeCapture()
        let schema = schema
        guard let replication else {
            return try Self.mapErrors {
                try pool.write { db in
                    try ScopeCapture.clear(db, schema: schema, captured: captured)
                    return try body(db)
                }
            }
        }
        return try replicatedWrite(replication) { db in
            try ScopeCapture.clear(db, schema: schema, captured: captured)
            return try body(db)
        }
    }

    /// Records in history, with each change of `keys`' entities, the values
    /// before and after of those keys (DESIGN.md §2: `store/history` of a
    /// scoped key judges its read rule on them). Replaces the keys recorded so
    /// far; the capture is installed before the next write.
    public func recordScopeValues(of keys: [String: Set<String>]) {
        let sorted = keys.filter { !$0.value.isEmpty }.mapValues { $0.sorted() }
        scopeRecording.withLock { recording in
            if recording.keys != sorted { recording = (sorted, nil, recording.captured) }
        }
    }

    /// The keys history records the values of, by entity, as installed (empty: none).
    var scopeCapture: [String: [String]] { scopeRecording.withLock { $0.captured } }

    /// Installs the capture of ``scopeRecording`` if the keys or the model
    /// changed since (in its own transaction, so a write that fails does not
    /// undo it); returns what is captured (the keys by entity).
    private func prepareScopeCapture() throws(RPCError) -> [String: [String]] {
        let schema = schema
        let (keys, installed, captured) = scopeRecording.withLock { $0 }
        guard installed != schema.version else { return captured }
        let fresh = try Self.mapErrors {
            try pool.write { db in try ScopeCapture.install(db, schema: schema, keys: keys) }
        }
        scopeRecording.withLock { recording in
            recording.captured = fresh
            if recording.keys == keys { recording.installed = schema.version }
        }
        return fresh
    }

    /// Writes what only this store keeps (the results cache): never replicated.
    func writeLocally<T>(_ body: (Database) throws -> T) throws(RPCError) -> T {
        precondition(snapshot == nil, "a snapshot store does not write")
        return try Self.mapErrors { try pool.write(body) }
    }

    /// Turns any thrown error into an ``RPCError``: our own pass through,
    /// SQLite's become -32603 with the failing statement.
    static func mapErrors<T>(_ body: () throws -> T) throws(RPCError) -> T {
        do {
            return try body()
        } catch {
            throw rpcError(error)
        }
    }

    /// `error` as an ``RPCError`` (see ``mapErrors(_:)``).
    static func rpcError(_ error: any Error) -> RPCError {
        switch error {
        case let error as RPCError:
            return error
        case let error as DatabaseError:
            if error.resultCode == .SQLITE_INTERRUPT { return .cancelled }
            if let message = error.message, message.hasPrefix(PredicateText.matchTimeoutPrefix) {
                return .invalidParams(message, field: "predicate")
            }
            return .internalError("database error: \(error.message ?? "\(error.resultCode)") in \(error.sql ?? "?")")
        default:
            return .internalError("\(error)")
        }
    }

    /// Writes the WAL back into the database file (at shutdown).
    public func checkpoint() {
        guard snapshot == nil else { return }
        _ = try? pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }
}

/// The reader connection a snapshot store reads through, valid while the
/// closure it was handed to runs (on that reader's queue).
final class SnapshotConnection: @unchecked Sendable {
    // @unchecked: used only inside the closure of `Store.readLatestCommit(_:)`, on its reader's queue.
    let db: Database

    init(db: Database) { self.db = db }
}
