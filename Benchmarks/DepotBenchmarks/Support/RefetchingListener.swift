import Foundation
import Logging
import PostgresNIO

/// What users build instead of live results on PostgreSQL: a connection that `LISTEN`s on the
/// channel a trigger notifies (`pg_notify`), and on each notification refetches the same query
/// (`id, sort key`, in order) and diffs it against the rows it held, as a client would.
///
/// Notifications that arrive while a refetch runs are folded into the next one (one refetch
/// covers them all), so the listener never falls behind a writer by more than one refetch. The
/// delta for the `k`th notification is known when the first refetch that started after it
/// arrived has been diffed (``deltaKnown(for:timeout:)``).
final class RefetchingListener: @unchecked Sendable {
    /// One row as the listener holds it: its id and its sort key.
    struct HeldRow: Equatable, Sendable {
        /// The row's id.
        var id: Int64
        /// Its sort key.
        var score: Int64
    }

    /// What one diff found.
    struct Delta: Sendable {
        /// Rows that entered.
        var inserted = 0
        /// Rows that left.
        var removed = 0
        /// Rows whose sort key changed (a move or an update).
        var updated = 0

        /// Whether nothing changed.
        var isEmpty: Bool { inserted == 0 && removed == 0 && updated == 0 }
    }

    private let connection: PostgresConnection
    private let sql: String
    private let logger: Logger
    private let lock = NSLock()
    private var received = 0
    private var listening = false
    private var refetches: [(covered: Int, at: ContinuousClock.Instant)] = []
    private var totals = Delta()
    private var tasks: [Task<Void, Never>] = []

    /// The rows held now (read after the listener is quiet).
    private(set) var held: [HeldRow] = []

    /// Connects, fetches `sql` (it selects `id, score` in order) once, and listens on `channel`;
    /// returns once `LISTEN` is in place (a notification the listener itself sends has come back).
    init(configuration: PostgresConnection.Configuration, channel: String, sql: String, logger: Logger) async throws {
        connection = try await PostgresConnection.connect(configuration: configuration, id: 100, logger: logger)
        self.sql = sql
        self.logger = logger
        held = try await fetch()
        let (dirty, marked) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let listen = Task { [connection, lock] in
            _ = try? await connection.listen(on: channel) { notifications in
                for try await notification in notifications {
                    if notification.payload == "ready" {
                        lock.withLock { self.listening = true }
                        continue
                    }
                    lock.withLock { self.received += 1 }
                    marked.yield()
                }
            }
            marked.finish()
        }
        let refetching = Task {
            for await _ in dirty {
                let covered = lock.withLock { received }
                guard let rows = try? await fetch() else { continue }
                let delta = Self.diff(held, rows)
                held = rows
                let now = ContinuousClock.now
                lock.withLock {
                    refetches.append((covered, now))
                    totals.inserted += delta.inserted
                    totals.removed += delta.removed
                    totals.updated += delta.updated
                }
            }
        }
        tasks = [listen, refetching]
        for _ in 0..<100 {
            _ = try await connection.query("SELECT pg_notify(\(channel), 'ready')", logger: logger)
            try await Task.sleep(for: .milliseconds(100))
            if lock.withLock({ listening }) { return }
        }
        throw BenchmarkError("LISTEN \(channel) never delivered a notification")
    }

    /// How many notifications have arrived (the `ready` probes aside).
    var notificationCount: Int { lock.withLock { received } }

    /// How many refetches have run.
    var refetchCount: Int { lock.withLock { refetches.count } }

    /// What every diff so far found, summed.
    var deltaTotals: Delta { lock.withLock { totals } }

    /// When the delta of the `k`th notification (1-based) was known: the end of the first refetch
    /// that started after it arrived. Polls every millisecond, up to `timeout`.
    func deltaKnown(for k: Int, timeout: Duration = .seconds(60)) async -> ContinuousClock.Instant? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let instant = lock.withLock({ refetches.first { $0.covered >= k }?.at }) { return instant }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return nil
    }

    /// Stops listening and closes the connection.
    func stop() async {
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        try? await connection.close()
    }

    private func fetch() async throws -> [HeldRow] {
        var rows: [HeldRow] = []
        for try await (id, score) in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
            .decode((Int64, Int64).self)
        {
            rows.append(HeldRow(id: id, score: score))
        }
        return rows
    }

    /// The delta from `old` to `new` by id: rows that entered, left, or whose sort key changed.
    static func diff(_ old: [HeldRow], _ new: [HeldRow]) -> Delta {
        var before = [Int64: Int64](minimumCapacity: old.count)
        for row in old { before[row.id] = row.score }
        var delta = Delta()
        for row in new {
            if let score = before.removeValue(forKey: row.id) {
                if score != row.score { delta.updated += 1 }
            } else {
                delta.inserted += 1
            }
        }
        delta.removed = before.count
        return delta
    }
}
