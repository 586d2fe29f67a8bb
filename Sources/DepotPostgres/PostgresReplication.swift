import DepotProtocol
import DepotStore
import Dispatch
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// A daemon's place in a cluster on PostgreSQL (DESIGN.md section 11): the
/// change log every daemon writes through, in one order, and follows.
///
/// Writes run on the store's writer, so one connection serves them, one
/// call at a time, blocking that thread; the follower has a connection of
/// its own, which LISTENs for the log's hints and polls its head. Every
/// failure of PostgreSQL reaches the caller as -32603 naming the cause,
/// within ``statementTimeout``: nothing waits for a server that went away.
/// Reconnection backs off from 50 ms to 2 s. docs/cluster.md tells the rest.
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
    /// What the log keeps, and for whom (``LogPruning``).
    public let pruning: LogPruning
    /// How often the follower prunes the log (when the retention prunes at all).
    public let pruneInterval: Duration
    /// The rows of an object table one round trip of a snapshot reads (memory holds one batch).
    public let snapshotBatch: Int
    /// The objects as tables, written with the entries.
    private let objectTables: PostgresObjectTables
    private let configuration: PostgresConnection.Configuration
    private let logger: Logger
    private let writer: BlockingConnection
    /// The follower's task, and the one that records this daemon's position and prunes.
    private let follower = Mutex<[Task<Void, Never>]>([])
    /// Whether the writer holds the write lock (touched on the store's writer only).
    private let holdsLock = Mutex(false)
    /// The newest entry this daemon appended: its own NOTIFY hints need no catch-up.
    private let lastOwnEntry = Mutex<Int64>(0)
    /// Other daemons' entries heard in NOTIFY payloads, not yet applied here.
    private let hinted = HintedEntries()

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
        pruning = LogPruning(log: log, retention: logRetention, grace: logGrace)
        self.pruneInterval = pruneInterval
        objectTables = PostgresObjectTables(log: log)
        self.node = node
        self.statementTimeout = statementTimeout
        self.pollInterval = pollInterval
        configuration = url.configuration
        self.logger = logger
        // The prepared append (``AppendStatement``) names no schema: its names resolve here.
        var writerConfiguration = url.configuration
        writerConfiguration.options.additionalStartupParameters.append(("search_path", "\"\(url.schema)\""))
        writer = BlockingConnection(configuration: writerConfiguration, timeout: statementTimeout, logger: logger)
        try writer.run { [log, logger, objectTables] connection in
            try await log.createSchema(on: connection, logger: logger)
            try await connection.withTransaction(logger: logger) { connection in
                // Daemons starting together would collide replacing the function: one at a time.
                try await connection.query("SELECT pg_advisory_xact_lock(\(log.lockKey))", logger: logger)
                // Its result gained a column (the checksum): a function's result type cannot be replaced.
                try await connection.query(
                    "DROP FUNCTION IF EXISTS \(unescaped: Self.beginWriteFunction(log)) (bigint, bigint)",
                    logger: logger)
                try await connection.query(
                    """
                    CREATE FUNCTION \(unescaped: Self.beginWriteFunction(log)) (after bigint, lock_key bigint)
                    RETURNS TABLE ("transaction" bigint, changes text, changeset bytea, checksum bigint)
                    LANGUAGE plpgsql VOLATILE AS $$
                    BEGIN
                        PERFORM pg_advisory_lock(lock_key);
                        -- A new statement in a VOLATILE function: a snapshot taken after the lock.
                        RETURN QUERY SELECT l."transaction", l.changes::text, l.changeset, l.checksum
                            FROM \(unescaped: log.log) l
                            WHERE l."transaction" > after ORDER BY l."transaction";
                    END
                    $$
                    """, logger: logger)
                try await connection.query(PostgresQuery(unsafeSQL: objectTables.functionStatement), logger: logger)
            }
        }
    }

    /// The function that takes the write lock and reads what follows a position, in one round trip.
    private static func beginWriteFunction(_ log: ChangeLog) -> String { "\"\(log.schema)\".depot_begin_write" }

    // MARK: Writes (on the store's writer)

    // A write appends optimistically: `INSERT … WHERE max = n - 1 ON CONFLICT DO NOTHING`, one
    // round trip, committing by itself (only the log is in PostgreSQL). Refused, it is run again under
    // the write lock: a session-level advisory lock held from reading the head until the entry's
    // INSERT has committed, then released. docs/cluster.md argues why the numbering stays safe.

    /// Unlocked: nothing to do. Locked: takes the write lock and reads what follows `position`, in one round trip.
    public func beginWrite(after position: Int64, locked: Bool) throws(RPCError) -> [ReplicatedEntry] {
        guard locked else { return [] }
        holdsLock.withLock { $0 = true }
        // The lock may be held by a long write (a big batch) on another daemon: wait for it as a
        // write waits behind a batch on one daemon, up to a bound.
        let rows = try writer.query(
            """
            SELECT "transaction", changes, changeset, checksum
            FROM \(unescaped: Self.beginWriteFunction(log))(\(position), \(log.lockKey))
            """, wait: lockTimeout)
        do {
            return try Self.entries(in: rows)
        } catch {
            abandonWrite()
            throw error
        }
    }

    /// Appends `entries` in one statement that commits by itself, with the rows they changed in the
    /// object tables, then releases the lock if held. A model change rebuilds the object tables,
    /// in one transaction with its entry.
    public func commitWrite(_ entries: [ReplicatedEntry]) throws(RPCError) -> Bool {
        guard let first = entries.first, let last = entries.last else { return true }
        // Without the lock, the entries also yield to a writer that holds it (a try-lock, for the
        // statement only): a write that was refused once and waits for the lock then always gets in.
        // A number taken meanwhile by another daemon fails the whole statement (its primary key):
        // all of a group or none of it.
        let locked = holdsLock.withLock { $0 }
        let tables = entries.compactMap(\.tables)
        let rebuild = tables.first { $0.model != nil }
        if entries.count == 1, rebuild == nil {
            return try finishWrite(appendPrepared(first, tables: tables.first, locked: locked), last: last.number)
        }
        var bindings = PostgresBindings(capacity: entries.count * 5 + 1)
        var rows: [String] = []
        var changes: [String] = []
        for entry in entries {
            let base = bindings.count
            bindings.append(entry.number)
            bindings.append(node)
            changes.append(String(decoding: JSONWriter.encode(Self.encode(entry)), as: UTF8.self))
            bindings.append(changes[changes.count - 1])
            if case .data(_, _, let changeset, _) = entry.content, !changeset.isEmpty {
                bindings.append(ByteBuffer(bytes: changeset))
            } else {
                bindings.appendNull()
            }
            if let checksum = entry.checksum { bindings.append(checksum) } else { bindings.appendNull() }
            rows.append(
                "($\(base + 1)::bigint, $\(base + 2)::text, $\(base + 3)::jsonb, $\(base + 4)::bytea, $\(base + 5)::bigint)"
            )
        }
        // The rows of a data entry go in the same statement, once the entries are in.
        var mirror = ""
        let changedTables = rebuild == nil ? tables.flatMap(\.tables) : []
        if !changedTables.isEmpty {
            bindings.append(PostgresObjectTables.json(changedTables))
            mirror = """
                , mirrored AS (
                    SELECT \(objectTables.writeFunction)($\(bindings.count)::jsonb) AS written
                    WHERE EXISTS (SELECT 1 FROM entry))
                """
        }
        // So are the ids of the saves (a snapshot carries them to a new replica).
        let saved = tables.flatMap(\.savedIDs)
        let forgotten = tables.flatMap(\.forgottenIDs)
        if !saved.isEmpty {
            // Encoded as one table's written rows (values as PostgreSQL reads them from JSON).
            bindings.append(
                PostgresObjectTables.json([ObjectTablesChange.Table(name: "", written: saved, deleted: [])]))
            mirror += """
                , saved AS (
                    INSERT INTO \(log.saveIDs) (save_id, transaction_id, answer)
                    SELECT r->>'save_id', (r->>'transaction_id')::bigint, r->>'answer'
                    FROM jsonb_array_elements($\(bindings.count)::jsonb->0->'written') r
                    WHERE EXISTS (SELECT 1 FROM entry)
                    ON CONFLICT (save_id) DO UPDATE SET transaction_id = excluded.transaction_id, answer = excluded.answer)
                """
        }
        if !forgotten.isEmpty {
            bindings.append(String(decoding: JSONWriter.encode(.array(forgotten.map(JSONValue.string))), as: UTF8.self))
            mirror += """
                , forgotten AS (
                    DELETE FROM \(log.saveIDs)
                    WHERE save_id IN (SELECT jsonb_array_elements_text($\(bindings.count)::jsonb))
                        AND EXISTS (SELECT 1 FROM entry))
                """
        }
        // The hint carries the entries when they fit: another daemon applies them without reading the log.
        bindings.append(LogHint.payload(for: entries, changes: changes, node: node))
        let payload = bindings.count
        let append = PostgresQuery(
            unsafeSQL: """
                WITH entry AS (
                    INSERT INTO \(log.log) ("transaction", author, changes, changeset, checksum)
                    SELECT * FROM (VALUES \(rows.joined(separator: ", "))) AS v
                    WHERE (SELECT coalesce(max("transaction"), 0) FROM \(log.log)) = \(first.number - 1)
                        AND (\(locked) OR pg_try_advisory_xact_lock(\(log.lockKey)))
                    RETURNING "transaction")\(mirror)
                SELECT pg_notify('\(log.channel)', $\(payload)::text)::text\(mirror.isEmpty ? "" : ", (SELECT count(*) FROM mirrored)")
                FROM entry HAVING count(*) > 0
                """, binds: bindings)
        let appended: Bool
        do {
            if let rebuild {
                appended = try rebuildTables(rebuild, appending: append)
            } else {
                appended = try writer.query(append, refusingOn: "23505")?.count == 1
            }
        } catch {
            // The connection was dropped, and the lock with it.
            holdsLock.withLock { $0 = false }
            throw error
        }
        return finishWrite(appended, last: last.number)
    }

    /// Ends a write once its append answered: frees the lock, records the entry as this daemon's.
    private func finishWrite(_ appended: Bool, last: Int64) -> Bool {
        // Committed (or refused): free the lock without waiting; the connection's next query goes after it.
        abandonWrite()
        guard appended else { return false }
        lastOwnEntry.withLock { $0 = max($0, last) }
        return true
    }

    /// Appends one entry with its rows through ``AppendStatement``; whether it went in (`false`:
    /// its number was taken).
    private func appendPrepared(_ entry: ReplicatedEntry, tables: ObjectTablesChange?, locked: Bool) throws(RPCError)
        -> Bool
    {
        let changes = String(decoding: JSONWriter.encode(Self.encode(entry)), as: UTF8.self)
        var changeset: [UInt8] = []
        if case .data(_, _, let bytes, _) = entry.content { changeset = bytes }
        let saved = tables?.savedIDs ?? []
        let forgotten = tables?.forgottenIDs ?? []
        let statement = AppendStatement(
            number: entry.number, node: node, changes: changes, changeset: changeset, checksum: entry.checksum,
            locked: locked, lockKey: log.lockKey,
            rows: tables.flatMap { $0.tables.isEmpty ? nil : PostgresObjectTables.json($0.tables) },
            saved: saved.isEmpty
                ? nil : PostgresObjectTables.json([ObjectTablesChange.Table(name: "", written: saved, deleted: [])]),
            forgotten: forgotten.isEmpty
                ? nil : String(decoding: JSONWriter.encode(.array(forgotten.map(JSONValue.string))), as: UTF8.self),
            channel: log.channel, payload: LogHint.payload(for: [entry], changes: [changes], node: node))
        do {
            return try writer.run { [logger] connection in
                do {
                    var rows = 0
                    for try await _ in try await connection.execute(statement, logger: logger) { rows += 1 }
                    return rows == 1
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
                    // Another daemon took the number first: refused, the connection kept.
                    return false
                }
            }
        } catch {
            // The connection was dropped, and the lock with it.
            holdsLock.withLock { $0 = false }
            throw error
        }
    }

    /// Runs `append` and, if it appended, rebuilds the object tables for `change`, in one transaction.
    private func rebuildTables(_ change: ObjectTablesChange, appending append: PostgresQuery) throws(RPCError) -> Bool {
        try writer.run(wait: lockTimeout) { [objectTables, logger] connection in
            try await connection.query("BEGIN", logger: logger)
            do {
                let appended = try await connection.query(append, logger: logger).collect().count == 1
                if appended { try await objectTables.rebuild(change, on: connection, logger: logger) }
                try await connection.query(appended ? "COMMIT" : "ROLLBACK", logger: logger)
                return appended
            } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
                // Another daemon took the number first: refused, as the statement alone would be.
                try await connection.query("ROLLBACK", logger: logger)
                return false
            }
            // Any other failure drops the connection, which rolls the transaction back.
        }
    }

    /// The objects and the log position they reflect, read in one REPEATABLE READ transaction on
    /// the writer's connection: the header first, then each table through a cursor,
    /// ``snapshotBatch`` rows a round trip, in binary, handed to `rows` as they come. The next
    /// batch is asked for before `rows` stores the one at hand, so PostgreSQL reads while SQLite writes.
    public func readSnapshot(
        begin: (ReplicaSnapshot) throws -> Void, rows: (_ table: String, _ batch: ReplicaSnapshot.Batch) throws -> Void
    ) throws -> Bool {
        try writer.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", wait: lockTimeout)
        var open = true
        // A failure of the writer's connection drops it, which ends the transaction; any other, this.
        defer { if open { writer.send("ROLLBACK") } }
        let header = try writer.run(wait: lockTimeout) { [objectTables, logger] connection in
            try await objectTables.snapshot(on: connection, logger: logger)
        }
        guard let (snapshot, tables) = header else {
            try writer.query("COMMIT")
            open = false
            return false
        }
        try begin(snapshot)
        let fetch = PostgresQuery(unsafeSQL: "FETCH \(snapshotBatch) FROM depot_snapshot")
        // The ids of committed saves last, loaded like a table of the replica's.
        for table in tables + [ReplicaSnapshot.saveIDsTable] {
            try writer.query(objectTables.snapshotCursor(table))
            var next = try writer.submit(fetch)
            while true {
                let fetched = try writer.wait(for: next, limit: lockTimeout)
                guard let batch = try PostgresObjectTables.batch(fetched) else { break }
                if fetched.count == snapshotBatch { next = try writer.submit(fetch) }
                try rows(table, batch)
                if fetched.count < snapshotBatch { break }
            }
            try writer.query("CLOSE depot_snapshot")
        }
        try writer.query("COMMIT")
        open = false
        return true
    }

    /// Releases the lock if held, without waiting.
    public func abandonWrite() {
        let held = holdsLock.withLock { held in
            defer { held = false }
            return held
        }
        guard held else { return }
        // Without a connection there is no lock to free; a failed unlock drops the connection, which frees it.
        writer.send("SELECT pg_advisory_unlock_all()")
    }

    /// Up to `limit` entries after `position`: those NOTIFY payloads carried when they follow
    /// `position` exactly (``HintedEntries``), else read on the writer's connection.
    public func entries(after position: Int64, limit: Int) throws(RPCError) -> [ReplicatedEntry] {
        if let heard = hinted.take(after: position, limit: limit) { return heard }
        let rows = try writer.query(
            """
            SELECT "transaction", changes::text, changeset, checksum FROM \(unescaped: log.log)
            WHERE "transaction" > \(position) ORDER BY "transaction" LIMIT \(Int64(limit))
            """)
        return try Self.entries(in: rows)
    }

    /// The entries of rows of `("transaction", changes, changeset, checksum)`.
    private static func entries(in rows: [PostgresRow]) throws(RPCError) -> [ReplicatedEntry] {
        do {
            return try rows.map { row in
                let (number, json, changeset, checksum) = try row.decode((Int64, String, Data?, Int64?).self)
                var entry = try decode(number: number, json: json, changeset: changeset)
                entry.checksum = checksum
                return entry
            }
        } catch {
            throw .internalError("the cluster's log cannot be read: \(ChangeLogError.wrapping(error))")
        }
    }

    // MARK: Pruning

    /// Records, on the writer's connection, that this daemon has applied every entry up to `position`.
    public func recordPosition(_ position: Int64) throws(RPCError) {
        try writer.run { [pruning, node, logger] connection in
            try await pruning.record(node: node, position: position, on: connection, logger: logger)
        }
    }

    /// Prunes the log now, on the writer's connection (the follower does it every ``pruneInterval``);
    /// returns how many entries went.
    @discardableResult
    public func prune() throws(RPCError) -> Int64 {
        try writer.run { [pruning, logger] connection in try await pruning.prune(on: connection, logger: logger) }
    }

    /// The oldest entry the log still holds (0 when it is empty).
    public func firstEntry() throws(RPCError) -> Int64 {
        try writer.run { [log, logger] connection in try await log.firstTransaction(on: connection, logger: logger) }
    }

    // MARK: Following

    /// Starts the follower task: LISTEN for hints, and read the head every poll interval.
    public func startFollowing(position: @escaping @Sendable () -> Int64, _ newEntries: @escaping @Sendable () -> Void)
    {
        let applied = position
        let position = { @Sendable [self] in max(position(), lastOwnEntry.withLock { $0 }) }
        let following = Reconnecting(
            configuration: configuration, logger: logger, job: "cluster follower", firstPause: .milliseconds(50),
            longestPause: .seconds(2))
        let task = Task { [log, logger, pollInterval, statementTimeout, hinted, node] in
            await following.run { connection in
                // Whatever was committed while this daemon was away or disconnected, from the log.
                hinted.reset()
                newEntries()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        try await connection.listen(on: log.channel) { notifications in
                            for try await notification in notifications {
                                guard let (head, author) = LogHint.header(of: notification.payload) else {
                                    // Not one of ours: read the log.
                                    newEntries()
                                    continue
                                }
                                // Its own appends were applied by its writes (one whose local
                                // commit failed is found by the poll): no catch-up racing the
                                // append's answer, and no round trip to find nothing.
                                guard head > position(), author != node else { continue }
                                hinted.hear(
                                    head: head, entries: LogHint.entries(in: notification.payload), after: applied())
                                newEntries()
                            }
                        }
                    }
                    group.addTask {
                        // NOTIFY is a hint only: the head is read at least every poll interval.
                        while !Task.isCancelled {
                            try await Task.sleep(for: pollInterval)
                            let head = try await withTimeout(statementTimeout) {
                                try await log.lastTransaction(on: connection, logger: logger)
                            }
                            hinted.sawHead(head)
                            if head > position() { newEntries() }
                        }
                    }
                    try await group.next()
                    group.cancelAll()
                }
            }
        }
        // On a connection of its own: a long prune must not hold up the follower's reads.
        let upkeep = Reconnecting(
            configuration: configuration, logger: logger, job: "cluster log upkeep", firstPause: .seconds(1),
            longestPause: .seconds(1))
        let maintenance = Task { [logger, statementTimeout, pruning, pruneInterval, node] in
            let interval = min(.seconds(1), pruning.grace / 4)
            let clock = ContinuousClock()
            let pruned = Mutex(clock.now - pruneInterval)
            await upkeep.run { connection in
                while !Task.isCancelled {
                    // This daemon's applied position, so that pruning keeps what it still needs.
                    try await withTimeout(statementTimeout) {
                        try await pruning.record(node: node, position: applied(), on: connection, logger: logger)
                    }
                    let due = pruned.withLock { last in
                        guard pruning.prunes, clock.now - last >= pruneInterval else { return false }
                        last = clock.now
                        return true
                    }
                    if due {
                        let removed = try await withTimeout(statementTimeout) {
                            try await pruning.prune(on: connection, logger: logger)
                        }
                        if removed > 0 { logger.debug("pruned \(removed) entries of the cluster's log") }
                    }
                    try await Task.sleep(for: interval)
                }
            }
        }
        follower.withLock { $0 = [task, maintenance] }
    }

    /// Stops the follower and closes the writer's connection.
    public func stop() {
        follower.withLock { tasks in
            tasks.forEach { $0.cancel() }
            tasks = []
        }
        writer.close()
    }
}
