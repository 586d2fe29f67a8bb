import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// Follows the change log for one daemon: delivers every committed entry once and in order, keeps its
/// position durable under its name, and rides out PostgreSQL going away.
///
/// ``run(isolation:_:)`` reads `WHERE transaction > last ORDER BY transaction LIMIT batchSize`,
/// hands each batch to the consumer and then saves `last` in the log's position table, so a tailer
/// restarted under the same name resumes after the last batch its consumer returned from (a batch
/// whose handling was interrupted is delivered again). NOTIFY only wakes it early; without a hint
/// it polls every ``Options/pollInterval``. When the connection fails or is lost, the consumer gets
/// ``Event/interrupted(_:)`` and the tailer reconnects with exponential backoff.
public struct ChangeLogTailer: Sendable {
    /// How a tailer reads and waits.
    public struct Options: Sendable {
        /// The most entries delivered in one batch.
        public var batchSize: Int = 256
        /// The longest wait between two reads when no NOTIFY hint arrives.
        public var pollInterval: Duration = .milliseconds(100)
        /// Whether to LISTEN for hints (turn off where NOTIFY is missing, e.g. CockroachDB).
        public var listens: Bool = true
        /// The first wait before reconnecting; it doubles up to ``maximumBackoff``.
        public var minimumBackoff: Duration = .milliseconds(50)
        /// The longest wait before reconnecting.
        public var maximumBackoff: Duration = .seconds(2)
        /// The longest a read or a position save may take before the connection is dropped as lost.
        public var statementTimeout: Duration = .seconds(10)

        /// The defaults: batches of 256, a 100 ms poll, LISTEN on, backoff from 50 ms to 2 s, 10 s per statement.
        public init() {}
    }

    /// What the consumer is told.
    public enum Event: Sendable {
        /// Connected, resuming after `position` (the last number saved under the tailer's name).
        case connected(position: Int64)
        /// The next committed entries, in order, each after the last one delivered.
        case entries([ChangeLogEntry])
        /// The connection failed or was lost; the tailer reconnects after a backoff.
        case interrupted(ChangeLogError)
    }

    /// The name the position is kept under: one per daemon.
    public let name: String
    /// The log it follows.
    public let log: ChangeLog
    /// How it connects.
    public let connection: PostgresConnection.Configuration
    /// How it reads and waits.
    public let options: Options
    private let logger: Logger

    /// A tailer named `name` following `log` on the server `connection` describes.
    public init(
        name: String, log: ChangeLog, connection: PostgresConnection.Configuration, options: Options = Options(),
        logger: Logger = Logger(label: "depot.changelog.tailer")
    ) {
        self.name = name
        self.log = log
        self.connection = connection
        self.options = options
        self.logger = logger
    }

    /// Delivers events to `handle` until the calling task is cancelled (then it returns) or `handle`
    /// throws (then it rethrows, without saving the position of the batch `handle` failed on).
    ///
    /// Connection failures never end the run: they reach `handle` as ``Event/interrupted(_:)``.
    public func run(
        isolation: isolated (any Actor)? = #isolation, _ handle: (Event) async throws -> Void
    ) async throws {
        var backoff = options.minimumBackoff
        var connectionID = 0
        while !Task.isCancelled {
            connectionID += 1
            let failure: ChangeLogError
            do {
                try await follow(connectionID: connectionID, backoff: &backoff, handle)
                return
            } catch let error as ConsumerFailure {
                throw error.underlying
            } catch {
                failure = ChangeLogError.wrapping(error)
            }
            if Task.isCancelled { return }
            logger.warning("change log tailer interrupted", metadata: ["tailer": "\(name)", "error": "\(failure)"])
            try await handle(.interrupted(failure))
            do { try await Task.sleep(for: backoff) } catch { return }
            backoff = min(backoff * 2, options.maximumBackoff)
        }
    }

    /// One connection's life: returns on cancellation, throws `ConsumerFailure` or a connection error.
    private func follow(
        isolation: isolated (any Actor)? = #isolation, connectionID: Int, backoff: inout Duration,
        _ handle: (Event) async throws -> Void
    ) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: self.connection, id: connectionID, logger: logger)
        do {
            var last = try await withDeadline(on: connection) { [log, name, logger] in
                try await log.position(of: name, on: connection, logger: logger)
            }
            backoff = options.minimumBackoff
            try await deliver(.connected(position: last), to: handle)
            let doorbell = Doorbell()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    // A connection closed while idle wakes the loop, which then reports it.
                    try? await connection.closeFuture.get()
                    doorbell.ring()
                }
                if options.listens {
                    group.addTask { [log] in
                        // Ends with the group (cancellation) or with the connection. Its error is not
                        // lost: the ring makes the read loop query at once and meet the same failure.
                        defer { doorbell.ring() }
                        try? await connection.listen(on: log.channel) { notifications in
                            for try await _ in notifications { doorbell.ring() }
                        }
                    }
                }
                // The close watcher ends only with the connection: close it on every way out.
                do {
                    while !Task.isCancelled {
                        let entries = try await withDeadline(on: connection) { [log, options, logger, last] in
                            try await log.entries(after: last, limit: options.batchSize, on: connection, logger: logger)
                        }
                        guard let newest = entries.last?.transaction else {
                            await doorbell.wait(timeout: options.pollInterval)
                            continue
                        }
                        try await deliver(.entries(entries), to: handle)
                        // Saved even when the run is being cancelled: the consumer has handled the batch.
                        try await withDeadline(on: connection, whenCancelled: .finish) { [log, name, logger] in
                            try await log.savePosition(newest, of: name, on: connection, logger: logger)
                        }
                        last = newest
                    }
                    group.cancelAll()
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            }
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Runs `operation`, failing (and closing the connection) if it takes longer than the statement
    /// timeout or the connection is already closed: a lost server must never leave the tailer waiting.
    ///
    /// The operation runs in a task of its own that is not awaited after a timeout: a query written
    /// to a connection that closed at that moment was seen never to complete.
    ///
    /// With `whenCancelled: .finish` it runs to completion (or timeout) even if the caller is cancelled.
    private func withDeadline<Value: Sendable>(
        on connection: PostgresConnection, whenCancelled: CancellationBehavior = .abandon,
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        guard !connection.isClosed else { throw ChangeLogError.database("the connection is closed") }
        let timeout = options.statementTimeout
        let outcome = FirstOutcome<Value>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                outcome.start(continuation)
                let timer = Task {
                    try await Task.sleep(for: timeout)
                    if outcome.finish(.failure(ChangeLogError.database("no answer within \(timeout)"))) {
                        try? await connection.close()
                    }
                }
                Task {
                    let result: Result<Value, any Error>
                    do { result = .success(try await operation()) } catch { result = .failure(error) }
                    timer.cancel()
                    outcome.finish(result)
                }
            }
        } onCancel: {
            if whenCancelled == .abandon { outcome.finish(.failure(CancellationError())) }
        }
    }

    private func deliver(
        isolation: isolated (any Actor)? = #isolation, _ event: Event, to handle: (Event) async throws -> Void
    ) async throws {
        do { try await handle(event) } catch { throw ConsumerFailure(underlying: error) }
    }
}

/// What a deadline-bound operation does when the waiting task is cancelled.
private enum CancellationBehavior {
    /// Stop waiting at once (a read: nothing is lost).
    case abandon
    /// Wait for it to complete or time out (a position save after the consumer handled a batch).
    case finish
}

/// Resumes a continuation with whichever outcome comes first; later ones are dropped.
private final class FirstOutcome<Value: Sendable>: Sendable {
    private enum State {
        case waiting
        case started(CheckedContinuation<Value, any Error>)
        case finishedEarly(Result<Value, any Error>)
        case done
    }

    private let state = Mutex<State>(.waiting)

    func start(_ continuation: CheckedContinuation<Value, any Error>) {
        let early: Result<Value, any Error>? = state.withLock { state in
            if case .finishedEarly(let result) = state {
                state = .done
                return result
            }
            state = .started(continuation)
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    /// Returns whether this outcome was the first.
    @discardableResult
    func finish(_ result: Result<Value, any Error>) -> Bool {
        let (first, continuation): (Bool, CheckedContinuation<Value, any Error>?) = state.withLock { state in
            switch state {
            case .waiting:
                state = .finishedEarly(result)
                return (true, nil)
            case .started(let continuation):
                state = .done
                return (true, continuation)
            case .finishedEarly, .done:
                return (false, nil)
            }
        }
        continuation?.resume(with: result)
        return first
    }
}

/// An error thrown by the consumer: it ends the run instead of causing a reconnect.
private struct ConsumerFailure: Error {
    var underlying: any Error
}
