import DepotProtocol
import DepotStore
import Logging
import PostgresNIO

/// A daemon's place in a cluster on PostgreSQL (DESIGN.md section 11): the
/// change log every daemon writes through, in one order, and follows.
///
/// It puts together three jobs, each a type of its own: ``LogWriter`` appends
/// the store's writes, on the store's writer, over one blocking connection
/// (``BlockingConnection``); ``LogFollower`` LISTENs for the log's hints and
/// polls its head on a connection of its own, and hands the store what other
/// daemons appended; ``LogUpkeep`` records this daemon's position and prunes
/// the log, on a third. The last two reconnect through ``Reconnecting``, backing
/// off from 50 ms to 2 s. Every failure of PostgreSQL reaches the caller as
/// -32603 naming the cause, within ``statementTimeout``: nothing waits for a
/// server that went away. docs/cluster.md tells the rest.
public final class PostgresReplication: StoreReplication {
    /// The log in the URL's schema.
    public let log: ChangeLog
    /// This daemon's name in the log's `author` column.
    public let node: String
    /// The longest one statement may take before its connection is dropped as lost.
    public let statementTimeout: Duration
    /// The longest the follower waits for a hint before it looks at the log's head.
    public let pollInterval: Duration
    /// The longest a write waits for the cluster's write lock (held by another daemon's write).
    public let lockTimeout: Duration = .seconds(120)
    /// The rows of an object table one round trip of a snapshot reads (memory holds one batch).
    public let snapshotBatch: Int
    /// What the log keeps, and for whom (``LogPruning``).
    public var pruning: LogPruning { upkeep.pruning }
    /// How often the log's upkeep prunes it (when the retention prunes at all).
    public var pruneInterval: Duration { upkeep.pruneInterval }
    let logger: Logger
    let writer: LogWriter
    private let follower: LogFollower
    private let upkeep: LogUpkeep

    /// Connects to the server `url` names and creates the log's tables there if missing.
    ///
    /// - Parameter node: this daemon's name in the log (its `author` column) and in
    ///   ``ChangeLog/positions``: stable across restarts, one per data directory.
    /// - Parameter logRetention: what the log keeps (`--log-retention`); `forever` never prunes.
    /// - Parameter logGrace: how long a daemon not seen holds entries back (`--log-grace`).
    public init(
        url: PostgresURL, node: String, statementTimeout: Duration = .seconds(10),
        pollInterval: Duration = .milliseconds(100), logRetention: HistoryRetention = .forever,
        logGrace: Duration = .seconds(600), pruneInterval: Duration = .seconds(10), snapshotBatch: Int = 20_000,
        logger: Logger = Logger(label: "depot.cluster")
    ) throws(RPCError) {
        self.snapshotBatch = max(1, snapshotBatch)
        do {
            log = try ChangeLog(schema: url.schema)
        } catch {
            throw .invalidParams("\(error)", field: "store")
        }
        self.node = node
        self.statementTimeout = statementTimeout
        self.pollInterval = pollInterval
        self.logger = logger
        // The prepared append (``AppendStatement``) names no schema: its names resolve here.
        var writerConfiguration = url.configuration
        writerConfiguration.options.additionalStartupParameters.append(("search_path", "\"\(url.schema)\""))
        let connection = BlockingConnection(
            configuration: writerConfiguration, timeout: statementTimeout, logger: logger)
        writer = LogWriter(
            log: log, node: node, connection: connection, lockTimeout: lockTimeout, logger: logger)
        follower = LogFollower(
            log: log, node: node, configuration: url.configuration, reader: connection, pollInterval: pollInterval,
            statementTimeout: statementTimeout, logger: logger)
        upkeep = LogUpkeep(
            pruning: LogPruning(log: log, retention: logRetention, grace: logGrace), pruneInterval: pruneInterval,
            node: node, configuration: url.configuration, connection: connection,
            statementTimeout: statementTimeout, logger: logger)
        try writer.createSchema()
    }

    // MARK: Writes (on the store's writer)

    /// Unlocked: nothing to do. Locked: takes the write lock and reads what follows `position`, in one round trip.
    public func beginWrite(after position: Int64, locked: Bool) throws(RPCError) -> [ReplicatedEntry] {
        try writer.begin(after: position, locked: locked)
    }

    /// Appends `entries` with the rows `tables` says the write left in the object tables, in one
    /// statement that commits by itself (with a model change's rebuild of the tables, in one
    /// transaction), then releases the lock if held.
    public func commitWrite(_ entries: [ReplicatedEntry], tables: ObjectTablesChange?) throws(RPCError) -> Bool {
        try writer.commit(entries, tables: tables)
    }

    /// Releases the lock if held, without waiting.
    public func abandonWrite() { writer.abandon() }

    /// Up to `limit` entries after `position`: those NOTIFY payloads carried when they follow
    /// `position` exactly, else read on the writer's connection.
    public func entries(after position: Int64, limit: Int) throws(RPCError) -> [ReplicatedEntry] {
        try follower.entries(after: position, limit: limit)
    }

    // MARK: Following and upkeep

    /// Starts the follower and the log's upkeep, each on a connection of its own.
    public func startFollowing(position: @escaping @Sendable () -> Int64, _ newEntries: @escaping @Sendable () -> Void)
    {
        follower.start(applied: position, ownHead: { [writer] in writer.newestOwnEntry }, newEntries)
        upkeep.start(applied: position)
    }

    /// Records, on the writer's connection, that this daemon has applied every entry up to `position`.
    public func recordPosition(_ position: Int64) throws(RPCError) { try upkeep.record(position) }

    /// Prunes the log now, on the writer's connection (the upkeep does it every ``pruneInterval``);
    /// returns how many entries went.
    @discardableResult
    public func prune() throws(RPCError) -> Int64 { try upkeep.prune() }

    /// The oldest entry the log still holds (0 when it is empty).
    public func firstEntry() throws(RPCError) -> Int64 {
        try writer.connection.run { [log, logger] connection in
            try await log.firstTransaction(on: connection, logger: logger)
        }
    }

    /// Stops the follower and the upkeep, and closes the writer's connection.
    public func stop() {
        follower.stop()
        upkeep.stop()
        writer.connection.close()
    }
}
