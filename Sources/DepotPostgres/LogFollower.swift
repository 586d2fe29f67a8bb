import DepotProtocol
import DepotStore
import Logging
import PostgresNIO
import Synchronization

/// Following the cluster's log, one job of ``PostgresReplication``: a task on a connection of its
/// own LISTENs for the log's hints and reads its head every poll interval, and tells the store
/// when there may be entries it has not applied; the store then reads them with
/// ``entries(after:limit:)``, from the hints when they carried them, else from the log on the
/// writer's connection (it reads on its writer, between writes).
final class LogFollower: Sendable {
    private let log: ChangeLog
    private let node: String
    private let pollInterval: Duration
    private let statementTimeout: Duration
    private let following: Reconnecting
    private let logger: Logger
    /// Where the log is read when the hints do not do: the writer's connection.
    private let reader: BlockingConnection
    /// Other daemons' entries heard in NOTIFY payloads, not yet applied here.
    private let hinted = HintedEntries()
    private let task = Mutex<Task<Void, Never>?>(nil)

    init(
        log: ChangeLog, node: String, configuration: PostgresConnection.Configuration, reader: BlockingConnection,
        pollInterval: Duration, statementTimeout: Duration, logger: Logger
    ) {
        self.log = log
        self.node = node
        self.reader = reader
        self.pollInterval = pollInterval
        self.statementTimeout = statementTimeout
        self.logger = logger
        following = Reconnecting(
            configuration: configuration, logger: logger, job: "cluster follower", firstPause: .milliseconds(50),
            longestPause: .seconds(2))
    }

    /// Starts the follower task: LISTEN for hints, and read the head every poll interval.
    ///
    /// `newEntries` is called, on the follower connection's event loop or task (it must not block:
    /// it queues the store's catch-up), whenever entries beyond what the store
    /// applied (`applied`) and this daemon appended (`ownHead`) may have been committed, and after
    /// every reconnection.
    func start(
        applied: @escaping @Sendable () -> Int64, ownHead: @escaping @Sendable () -> Int64,
        _ newEntries: @escaping @Sendable () -> Void
    ) {
        let position = { @Sendable in max(applied(), ownHead()) }
        let running = Task { [log, logger, pollInterval, statementTimeout, hinted, node, following] in
            await following.run { connection in
                hinted.reset()
                // A hint is handled where it arrives, on the connection's event loop: its header and
                // entries are read there and the store's catch-up is queued from there (straight onto
                // its writer), with no hop to a task in between.
                let listening = connection.addListener(channel: log.channel) { _, notification in
                    guard let (head, author) = LogHint.header(of: notification.payload) else {
                        // Not one of ours: read the log.
                        return newEntries()
                    }
                    // Its own appends were applied by its writes (one whose local commit failed is
                    // found by the poll): no catch-up racing the append's answer, and no round trip
                    // to find nothing.
                    guard head > position(), author != node else { return }
                    hinted.hear(head: head, entries: LogHint.entries(in: notification.payload), after: applied())
                    newEntries()
                }
                defer { listening.stop() }
                // The listener sent its own LISTEN first: once this one answers, hints arrive (a
                // LISTEN that fails fails this, and the connection is made again).
                try await withTimeout(statementTimeout) {
                    try await connection.query(PostgresQuery(unsafeSQL: #"LISTEN "\#(log.channel)""#), logger: logger)
                }
                // Whatever was committed while this daemon was away or disconnected, from the log.
                newEntries()
                // The listener does not say when the connection goes: this stream ends then.
                let (closed, closing) = AsyncStream<Void>.makeStream()
                connection.closeFuture.whenComplete { _ in closing.finish() }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await _ in closed {}
                        try Task.checkCancellation()
                        throw ChangeLogError.database("the follower's connection closed")
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
        task.withLock { $0 = running }
    }

    /// Up to `limit` entries after `position`: those NOTIFY payloads carried when they follow
    /// `position` exactly (``HintedEntries``), else read on the writer's connection.
    func entries(after position: Int64, limit: Int) throws(RPCError) -> [ReplicatedEntry] {
        if let heard = hinted.take(after: position, limit: limit) { return heard }
        let rows = try reader.query(
            """
            SELECT "transaction", changes::text, changeset, checksum FROM \(unescaped: log.log)
            WHERE "transaction" > \(position) ORDER BY "transaction" LIMIT \(Int64(limit))
            """)
        return try PostgresReplication.entries(in: rows)
    }

    /// Stops the follower task.
    func stop() {
        task.withLock { task in
            task?.cancel()
            task = nil
        }
    }
}
