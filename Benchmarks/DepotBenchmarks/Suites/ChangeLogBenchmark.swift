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
