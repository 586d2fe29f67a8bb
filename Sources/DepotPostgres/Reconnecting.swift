import Logging
import PostgresNIO

/// Keeps a PostgreSQL connection of its own for a long-running job (the
/// cluster's follower, the log's upkeep) until its task is cancelled:
/// connects, runs the job on the connection, and when either fails logs it
/// and connects again after a pause.
struct Reconnecting: Sendable {
    /// Where to connect.
    let configuration: PostgresConnection.Configuration
    /// Where failures are logged.
    let logger: Logger
    /// What the job is, for the log ("cluster follower").
    let job: String
    /// The pause after a failure, from a connection that worked.
    let firstPause: Duration
    /// The longest pause: each failure in a row doubles the last one up to it.
    let longestPause: Duration

    /// Runs `body` on each new connection until the calling task is cancelled.
    func run(_ body: @escaping @Sendable (PostgresConnection) async throws -> Void) async {
        var pause = firstPause
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            do {
                let connection = try await PostgresConnection.connect(
                    configuration: configuration, id: attempt, logger: logger)
                defer { Task { try? await connection.close() } }
                pause = firstPause
                try await body(connection)
            } catch {
                if Task.isCancelled { return }
                logger.warning("\(job) failed: \(ChangeLogError.wrapping(error)); retrying")
            }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, longestPause)
        }
    }
}
