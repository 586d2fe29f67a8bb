import DepotProtocol
import DepotStore
import Logging
import PostgresNIO
import Synchronization

/// The log's upkeep, one job of ``PostgresReplication``: a task on a connection of its own records
/// this daemon's applied position every second (so that pruning keeps what it still needs) and
/// prunes the log every prune interval (``LogPruning``); a long prune never holds up the
/// follower's reads. Tests and tools record and prune at once on the writer's connection.
final class LogUpkeep: Sendable {
    /// What the log keeps, and for whom.
    let pruning: LogPruning
    /// How often the task prunes the log (when the retention prunes at all).
    let pruneInterval: Duration
    private let node: String
    private let statementTimeout: Duration
    private let upkeep: Reconnecting
    private let logger: Logger
    /// The writer's connection, for the calls made at once.
    private let connection: BlockingConnection
    private let task = Mutex<Task<Void, Never>?>(nil)

    init(
        pruning: LogPruning, pruneInterval: Duration, node: String, configuration: PostgresConnection.Configuration,
        connection: BlockingConnection, statementTimeout: Duration, logger: Logger
    ) {
        self.pruning = pruning
        self.pruneInterval = pruneInterval
        self.node = node
        self.connection = connection
        self.statementTimeout = statementTimeout
        self.logger = logger
        upkeep = Reconnecting(
            configuration: configuration, logger: logger, job: "cluster log upkeep", firstPause: .seconds(1),
            longestPause: .seconds(1))
    }

    /// Starts the upkeep task; `applied` is the store's applied position.
    func start(applied: @escaping @Sendable () -> Int64) {
        let running = Task { [logger, statementTimeout, pruning, pruneInterval, node, upkeep] in
            let interval = min(.seconds(1), pruning.grace / 4)
            let clock = ContinuousClock()
            let pruned = Mutex(clock.now - pruneInterval)
            await upkeep.run { connection in
                while !Task.isCancelled {
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
        task.withLock { $0 = running }
    }

    /// Records, on the writer's connection, that this daemon has applied every entry up to `position`.
    func record(_ position: Int64) throws(RPCError) {
        try connection.run { [pruning, node, logger] connection in
            try await pruning.record(node: node, position: position, on: connection, logger: logger)
        }
    }

    /// Prunes the log now, on the writer's connection; returns how many entries went.
    func prune() throws(RPCError) -> Int64 {
        try connection.run { [pruning, logger] connection in try await pruning.prune(on: connection, logger: logger) }
    }

    /// Stops the upkeep task.
    func stop() {
        task.withLock { task in
            task?.cancel()
            task = nil
        }
    }
}
