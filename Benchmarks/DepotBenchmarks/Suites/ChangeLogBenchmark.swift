import DepotPostgres
import DepotProtocol
import Foundation
import Glibc
import Logging
import PostgresNIO

/// What the cluster change log costs a write: a transaction that inserts one row and appends its
/// change log entry, against the same single-row insert transaction through raw postgres-nio, from
/// one connection and from 24 at once, on a throwaway PostgreSQL started by `scripts/postgres.sh`.
///
/// The server keeps `fsync` on here, so that the commit's flush — which the log's advisory lock
/// serializes (docs/cluster.md) — costs what it costs in production.
struct ChangeLogBenchmark: Benchmark {
    static let name = "changelog"
    static let summary =
        "insert transactions/s with the cluster change log vs raw postgres-nio, 1 and 24 connections (no target yet)"
    static let connections = 24

    func run(_ suite: SuiteRun) async throws {
        let server = try ThrowawayPostgres(directory: suite.directory.appendingPathComponent("postgres"))
        defer { server.stop() }
        let logger = Logger(label: "depot.bench.changelog")
        let log = try ChangeLog(schema: "bench")
        var opened: [PostgresConnection] = []
        for id in 0..<Self.connections {
            opened.append(
                try await PostgresConnection.connect(configuration: server.url.configuration, id: id, logger: logger))
        }
        let connections = opened
        defer { for connection in connections { Task { try? await connection.close() } } }
        try await log.createSchema(on: connections[0], logger: logger)
        try await connections[0].query(
            "CREATE TABLE bench.items (id bigserial PRIMARY KEY, connection int NOT NULL, body text NOT NULL)",
            logger: logger)

        @Sendable func insert(_ connection: PostgresConnection, _ index: Int, logged: Bool) async throws {
            _ = try await connection.withTransaction(logger: logger) { connection in
                try await connection.query(
                    "INSERT INTO bench.items (connection, body) VALUES (\(connection.id), \("item \(index)"))",
                    logger: logger)
                if logged {
                    try await log.append(
                        changes: ["Item": ["inserted": [.int(Int64(index))]]], author: "bench", on: connection,
                        logger: logger)
                }
            }
        }
        @Sendable func concurrently(_ iteration: Int, logged: Bool) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for connection in connections {
                    group.addTask { try await insert(connection, iteration, logged: logged) }
                }
                try await group.waitForAll()
            }
        }

        let measured = try await suite.sampler.measure([
            BenchmarkCase("changelog.1.logged", unit: "transaction") {
                try await insert(connections[0], $0, logged: true)
            },
            BenchmarkCase("changelog.1.raw", unit: "transaction") {
                try await insert(connections[0], $0, logged: false)
            },
            BenchmarkCase("changelog.\(Self.connections).logged", unit: "\(Self.connections) transactions") {
                try await concurrently($0, logged: true)
            },
            BenchmarkCase("changelog.\(Self.connections).raw", unit: "\(Self.connections) transactions") {
                try await concurrently($0, logged: false)
            },
        ])
        suite.record(measured)
        suite.compare("changelog.1", measured[0], to: measured[1], target: nil)
        suite.compare("changelog.\(Self.connections)", measured[2], to: measured[3], target: nil)
        suite.note("entries", .int(try await log.lastTransaction(on: connections[0], logger: logger)))
    }
}

/// A PostgreSQL server from `scripts/postgres.sh`, fsync on, stopped by ``stop()``.
private struct ThrowawayPostgres {
    let directory: URL
    let url: PostgresURL
    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("scripts/postgres.sh")

    init(directory: URL) throws {
        self.directory = directory
        let output = try Self.run("start", directory)
        guard let line = output.split(separator: "\n").last else { throw BenchmarkError("postgres.sh printed no URL") }
        url = try PostgresURL(String(line))
    }

    func stop() { _ = try? Self.run("stop", directory) }

    /// posix_spawn and waitpid: Foundation's Process.waitUntilExit was seen to hang after this
    /// script exited, its child the postmaster living on (Tests/DepotPostgresTests do the same).
    private static func run(_ command: String, _ directory: URL) throws -> String {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("depot-bench-pg-\(UUID()).out")
        defer { try? FileManager.default.removeItem(at: output) }
        let arguments = [
            "/bin/bash", "-c", "PG_FSYNC=on exec /bin/bash \"$0\" \"$1\" \"$2\" >\"$3\" 2>&1 </dev/null",
            script.path, command, directory.path, output.path,
        ]
        let cArguments = arguments.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/bin/bash", nil, nil, cArguments, environ) == 0 else {
            throw BenchmarkError("could not start scripts/postgres.sh")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        guard status == 0 else { throw BenchmarkError("scripts/postgres.sh \(command) failed: \(text)") }
        return text
    }
}
