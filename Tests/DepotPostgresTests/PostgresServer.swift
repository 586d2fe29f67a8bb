import DepotPostgres
import DepotTestSupport
import Foundation
import Logging
import PostgresNIO
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A real, throwaway PostgreSQL server started by `scripts/postgres.sh` in a temporary directory.
///
/// ``shared`` is started once per test process and stopped when the process exits; tests that stop
/// the server on purpose start their own with ``start()``.
final class PostgresServer: Sendable {
    /// The server every test of the process shares; each test works in its own schema.
    static let shared: Result<PostgresServer, any Error> = {
        let result = Result { try PostgresServer.start() }
        if case .success = result { atexit { try? PostgresServer.sharedServer?.stop() } }
        return result
    }()

    private static var sharedServer: PostgresServer? { try? shared.get() }

    let directory: URL
    let url: PostgresURL

    private init(directory: URL, url: PostgresURL) {
        self.directory = directory
        self.url = url
    }

    /// Starts a new server in a new temporary directory.
    static func start() throws -> PostgresServer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-postgres-\(UUID().uuidString.prefix(8))")
        let output = try PostgresScript.run("start", directory)
        return PostgresServer(directory: directory, url: try PostgresURL(PostgresScript.url(in: output)))
    }

    /// Starts the shared server if needed; fails the test with the script's message if it cannot.
    static func sharedOrFail() throws -> PostgresServer {
        switch shared {
        case .success(let server): return server
        case .failure(let error): throw error
        }
    }

    /// Stops the server and removes its directory.
    func stop() throws {
        _ = try PostgresScript.run("stop", directory)
        try? FileManager.default.removeItem(at: directory)
    }

    /// Stops the server, keeping its data; returns what the script said.
    @discardableResult
    func pause() throws -> String { try PostgresScript.run("stop", directory) }

    /// Starts the paused server again, on the same port.
    func resume() throws {
        let output = PostgresScript.url(in: try PostgresScript.run("start", directory))
        guard try PostgresURL(output) == url else {
            throw PostgresScript.Failure(command: "start", status: 0, output: "restarted on another port: \(output)")
        }
    }

    /// A new connection to the server.
    func connect(logger: Logger = Logger(label: "depot.tests.postgres")) async throws -> PostgresConnection {
        try await PostgresConnection.connect(
            configuration: url.configuration, id: Int.random(in: 1...Int(Int32.max)), logger: logger)
    }

    /// Runs `body` on a new connection and closes it however `body` ends (PostgresNIO asserts
    /// that a connection is closed before it is freed).
    func withConnection<Value>(
        isolation: isolated (any Actor)? = #isolation, _ body: (PostgresConnection) async throws -> Value
    ) async throws -> Value {
        let connection = try await connect()
        do {
            let value = try await body(connection)
            try? await connection.close()
            return value
        } catch {
            try? await connection.close()
            throw error
        }
    }
}

/// A schema name no other test uses.
func uniqueSchema(_ prefix: String) -> String {
    "\(prefix)_\(UInt32.random(in: 0...UInt32.max))"
}

extension PostgresServer {
    /// Runs `body` on a new connection from a synchronous test, waiting for it.
    func withConnectionBlocking<Value: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> Value
    ) throws -> Value {
        let outcome = Shared<Result<Value, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let logger = Logger(label: "depot.tests.postgres")
            do {
                let value = try await self.withConnection { try await body($0, logger) }
                outcome.withLock { $0 = .success(value) }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }
}
