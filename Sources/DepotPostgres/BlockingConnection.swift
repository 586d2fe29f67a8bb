import DepotProtocol
import Dispatch
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// Runs `operation`, failing if it takes longer than `timeout`.
func withTimeout<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws
    -> T
{
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let value = try await group.next() ?? nil else {
            throw ChangeLogError.database("no answer within \(timeout)")
        }
        return value
    }
}

/// One PostgreSQL connection used from one thread at a time, blocking it:
/// the store's writer runs synchronously.
///
/// Any failure drops the connection (which ends its transaction and frees
/// its locks); the next call reconnects, but not before a backoff that
/// doubles from 50 ms to 2 s, failing fast with the last cause meanwhile.
final class BlockingConnection: @unchecked Sendable {
    // @unchecked: its state is touched by one thread at a time (the store's writer), or under `state`.
    private struct State {
        var connection: PostgresConnection?
        var backoff = Duration.milliseconds(50)
        var retryAt: ContinuousClock.Instant?
        var lastFailure = ""
        var attempts = 0
    }

    private let configuration: PostgresConnection.Configuration
    private let timeout: Duration
    private let logger: Logger
    private let state = Mutex(State())

    init(configuration: PostgresConnection.Configuration, timeout: Duration, logger: Logger) {
        self.configuration = configuration
        self.timeout = timeout
        self.logger = logger
    }

    /// Runs `query` and waits for its rows: the writer's thread hands it to the connection's event
    /// loop and sleeps until the answer, with no task in between (each hop is a thread wake-up).
    ///
    /// - Parameter wait: how long to wait instead of the statement timeout (a lock wait).
    func query(_ query: PostgresQuery, wait: Duration? = nil) throws(RPCError) -> [PostgresRow] {
        // Without a state to refuse on, every error throws: the result is never nil.
        try self.query(query, refusingOn: nil, wait: wait)!
    }

    /// ``query(_:wait:)``, but `nil` (the connection kept) when PostgreSQL refuses it with SQLSTATE `refusal`.
    func query(_ query: PostgresQuery, refusingOn refusal: String?, wait: Duration? = nil) throws(RPCError)
        -> [PostgresRow]?
    {
        let pending = try submit(query)
        switch pending.outcome(within: wait ?? timeout) {
        case nil:
            throw fail(ChangeLogError.database("no answer within \(wait ?? timeout)"))
        case .success(let rows):
            return rows
        case .failure(let error as PSQLError) where refusal != nil && error.serverInfo?[.sqlState] == refusal:
            return nil
        case .failure(let error):
            throw fail(error)
        }
    }

    /// Sends `query` without waiting for its rows: ``wait(for:limit:)`` gets them. Queries run in
    /// the order they were sent, so the caller may work while PostgreSQL answers.
    func submit(_ query: PostgresQuery) throws(RPCError) -> PendingQuery {
        let pending = PendingQuery()
        try connected().query(query, logger: logger).whenComplete { result in pending.complete(result.map(\.rows)) }
        return pending
    }

    /// The rows of a query sent with ``submit(_:)``, waiting at most `limit` (the statement timeout by default).
    func wait(for pending: PendingQuery, limit: Duration? = nil) throws(RPCError) -> [PostgresRow] {
        switch pending.outcome(within: limit ?? timeout) {
        case nil: throw fail(ChangeLogError.database("no answer within \(limit ?? timeout)"))
        case .success(let rows): return rows
        case .failure(let error): throw fail(error)
        }
    }

    /// Sends `sql` without waiting: it runs after every query sent before it; a failure drops the connection.
    func send(_ sql: String) {
        guard let connection = state.withLock({ $0.connection }), !connection.isClosed else { return }
        connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).whenFailure { [logger] error in
            logger.warning("PostgreSQL failed: \(ChangeLogError.wrapping(error)); dropping the connection")
            connection.close().whenComplete { _ in }
        }
    }

    fileprivate static func interval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// Runs `operation` on the connection, connecting first if needed, and waits for it (at most
    /// `limit`, the statement timeout by default).
    func run<T: Sendable>(
        wait limit: Duration? = nil, _ operation: @escaping @Sendable (PostgresConnection) async throws -> T
    ) throws(RPCError) -> T {
        let connection = try connected()
        switch wait(limit: limit, { try await operation(connection) }) {
        case .success(let value):
            return value
        case .failure(let error):
            throw fail(error)
        }
    }

    /// Closes the connection (the daemon stops).
    func close() {
        let connection = state.withLock { state in
            defer { state.connection = nil }
            return state.connection
        }
        if let connection { _ = wait { try await connection.close() } }
    }

    private func connected() throws(RPCError) -> PostgresConnection {
        let (existing, retryAt, lastFailure, attempt) = state.withLock { state in
            state.attempts += 1
            return (state.connection, state.retryAt, state.lastFailure, state.attempts)
        }
        if let existing, !existing.isClosed { return existing }
        if let retryAt, ContinuousClock.now < retryAt {
            throw .internalError("the cluster's PostgreSQL is unreachable: \(lastFailure)")
        }
        switch wait({ [configuration, logger] in
            try await PostgresConnection.connect(configuration: configuration, id: attempt, logger: logger)
        }) {
        case .success(let connection):
            state.withLock { state in
                state.connection = connection
                state.backoff = .milliseconds(50)
                state.retryAt = nil
            }
            return connection
        case .failure(let error):
            throw fail(error)
        }
    }

    /// Drops the connection and schedules the next attempt; the error for the caller.
    private func fail(_ error: any Error) -> RPCError {
        let cause = ChangeLogError.wrapping(error).description
        let connection = state.withLock { state in
            defer {
                state.connection = nil
                state.lastFailure = cause
                state.retryAt = .now + state.backoff
                state.backoff = min(state.backoff * 2, .seconds(2))
            }
            return state.connection
        }
        if let connection { Task { try? await connection.close() } }
        logger.warning("PostgreSQL failed: \(cause)")
        return .internalError("the cluster's PostgreSQL failed: \(cause)")
    }

    /// Waits for `operation` at most `limit` (the timeout by default).
    private func wait<T: Sendable>(limit: Duration? = nil, _ operation: @escaping @Sendable () async throws -> T)
        -> Result<T, any Error>
    {
        let outcome = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let task = Task {
            let result: Result<T, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        if done.wait(timeout: .now() + Self.interval(limit ?? timeout)) == .timedOut {
            task.cancel()
            return .failure(ChangeLogError.database("no answer within \(limit ?? timeout)"))
        }
        return outcome.withLock { $0! }
    }
}

/// A query sent on a ``BlockingConnection`` whose rows are not yet waited for.
final class PendingQuery: Sendable {
    private let result = Mutex<Result<[PostgresRow], any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    /// Records the query's outcome and wakes the waiter.
    fileprivate func complete(_ outcome: Result<[PostgresRow], any Error>) {
        result.withLock { $0 = outcome }
        done.signal()
    }

    /// The outcome, once it came within `limit`; nil if it did not.
    fileprivate func outcome(within limit: Duration) -> Result<[PostgresRow], any Error>? {
        guard done.wait(timeout: .now() + BlockingConnection.interval(limit)) == .success else { return nil }
        return result.withLock { $0 }
    }
}
