import DepotPostgres
import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import GRDB
import Logging
import PostgresNIO
import XCTest

/// Predicates compiled for PostgreSQL (SQLDialect.postgresql) against a real server: the case table
/// and the random differential test of DepotStoreTests, on the same rows, agree with the in-memory
/// evaluator; the helper functions fold and match as PredicateText does.
final class PredicatePostgresTests: XCTestCase {
    private let logger = Logger(label: "depot.tests.predicates")

    /// The shared server; skips only when PostgreSQL is not installed (CI installs it).
    private func server() throws -> PostgresServer {
        let binaries =
            ProcessInfo.processInfo.environment["PG_BIN"].map { [$0] }
            ?? {
                let root = "/usr/lib/postgresql"
                return ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).map { "\(root)/\($0)/bin" }
            }()
        guard binaries.contains(where: { FileManager.default.isExecutableFile(atPath: "\($0)/initdb") }) else {
            throw XCTSkip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): make setup-system")
        }
        return try PostgresServer.sharedOrFail()
    }

    /// A SQLite store with the predicate model, filled by `seed`.
    private func sqliteStore(_ seed: (Store) throws -> Void) throws -> Store {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-pg-predicates-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("p.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        try seed(store)
        return store
    }

    /// Creates the store's tables in a new PostgreSQL schema and copies every object and pair into them,
    /// through the wire values the store returns (ids kept); leaves the connection's search_path on it.
    private func load(_ store: Store, on connection: PostgresConnection) async throws -> PostgresStoreSchema {
        let tables = try PostgresStoreSchema(name: uniqueSchema("predicates"), model: store.schema)
        try await tables.create(on: connection, logger: logger)
        try await connection.query(PostgresQuery(unsafeSQL: tables.searchPath), logger: logger)
        for entity in store.schema.entities {
            let keys = entity.columnKeys
            let columns = (["id"] + keys.map { entity.column($0) }).joined(separator: ", ")
            let placeholders = (1...(keys.count + 1)).map { "$\($0)" }.joined(separator: ", ")
            let insert = "INSERT INTO \(entity.table) (\(columns)) VALUES (\(placeholders))"
            let joined = entity.joins.filter { $0.value.isFirstSide }
            let objects =
                try store.fetch(
                    FetchRequest(
                        entity: entity.name, properties: entity.description.attributes.map(\.name) + keys + joined.keys)
                ).objects ?? []
            for object in objects {
                let id = try XCTUnwrap(object["id"]?.stringValue.flatMap(ObjectID.init))
                var bindings = PostgresBindings()
                bindings.append(id.row)
                for key in keys {
                    let value = object[key] ?? .null
                    if let attribute = entity.attributes[key] {
                        let stored = try ValueCoding.databaseValue(value, type: attribute.type)
                        if attribute.type == .boolean, case .int64(let flag) = stored.storage {
                            bindings.append(flag != 0)
                        } else {
                            bindings.append(stored)
                        }
                    } else if let text = value.stringValue, let reference = ObjectID(text) {
                        bindings.append(reference.row)
                    } else {
                        bindings.appendNull()
                    }
                }
                try await connection.query(PostgresQuery(unsafeSQL: insert, binds: bindings), logger: logger)
                for (key, join) in joined {
                    for member in object[key]?.arrayValue ?? [] {
                        let memberID = try XCTUnwrap(member.stringValue.flatMap(ObjectID.init))
                        var pair = PostgresBindings()
                        pair.append(id.row)
                        pair.append(memberID.row)
                        try await connection.query(
                            PostgresQuery(
                                unsafeSQL:
                                    "INSERT INTO \(join.table) (\(join.ownerColumn), \(join.memberColumn)) VALUES ($1, $2)",
                                binds: pair), logger: logger)
                    }
                }
            }
        }
        return tables
    }

    /// The ids of the teams `predicate` selects in PostgreSQL.
    private func teamIDs(
        _ predicate: String, _ arguments: JSONValue? = nil, schema: Schema, on connection: PostgresConnection
    ) async throws -> Set<String> {
        let entity = try schema.entity("Team")
        let condition = try PredicateCompilation.whereClause(
            predicate: predicate, arguments: arguments, entity: entity, schema: schema, dialect: .postgresql)
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT t0.id FROM \(entity.table) AS t0 WHERE \(condition.sql)",
                binds: PostgresBindings(condition.arguments)), logger: logger)
        var ids = Set<String>()
        for try await id in rows.decode(Int64.self) { ids.insert("Team/\(id)") }
        return ids
    }

    /// The whole case table of DepotStoreTests: PostgreSQL selects the listed teams, as the evaluator does.
    func testCaseTableMatchesTheEvaluator() async throws {
        let server = try server()
        let store = try sqliteStore { store in
            try PredicateFixture.seedCaseTable(
                save: { _ = try store.save($0) }, fetchIDs: { try store.fetch($0).ids ?? [] })
        }
        let (evaluator, teams) = try PredicateFixture.evaluator { try store.fetch($0).objects ?? [] }
        var letters: [String: String] = [:]
        for team in teams {
            letters[team["id"]!.stringValue!] = PredicateFixture.teamLetters[team["teamName"]?.stringValue ?? ""]
        }
        try await server.withConnection { connection in
            _ = try await load(store, on: connection)
            var failures: [String] = []
            var passed = 0
            for (predicate, arguments, expected) in PredicateFixture.cases {
                do {
                    let ids = try await teamIDs(predicate, arguments, schema: store.schema, on: connection)
                    let got = ids.compactMap { letters[$0] }.sorted().joined()
                    let node = try PredicateParser.parse(predicate, arguments: arguments)
                    let inMemory = try teams.filter {
                        try evaluator.evaluate(node, on: $0.objectValue!, entity: "Team")
                    }.compactMap { letters[$0["id"]!.stringValue!] }.sorted().joined()
                    if got != expected || inMemory != expected {
                        failures.append("\(predicate): expected \(expected), PostgreSQL \(got), evaluator \(inMemory)")
                    } else {
                        passed += 1
                    }
                } catch {
                    failures.append("\(predicate): \(error)")
                }
            }
            XCTAssertGreaterThanOrEqual(PredicateFixture.cases.count, 150)
            XCTAssertEqual(passed, PredicateFixture.cases.count)
            XCTAssertTrue(
                failures.isEmpty,
                "\(failures.count) of \(PredicateFixture.cases.count) cases failed on PostgreSQL:\n"
                    + failures.joined(separator: "\n"))
        }
    }

    /// The random differential test of DepotStoreTests (same seed, rows and predicates) on PostgreSQL.
    func testRandomPredicatesMatchTheEvaluator() async throws {
        let server = try server()
        var random = SeededGenerator(seed: 2026)
        let inserted = PredicateFixture.differentialRows(&random)
        let store = try sqliteStore { store in _ = try store.save(StoreSave.Parameters(inserted: inserted)) }
        let (evaluator, teams) = try PredicateFixture.evaluator { try store.fetch($0).objects ?? [] }
        let predicates = (0..<2500).map { _ in PredicateFixture.randomPredicate(depth: 3, &random) }
        try await server.withConnection { connection in
            _ = try await load(store, on: connection)
            var checked = 0
            var disagreements: [String] = []
            for predicate in predicates {
                let ids: Set<String>
                let node: PredicateNode
                do {
                    node = try PredicateParser.parse(predicate)
                    ids = try await teamIDs(predicate, schema: store.schema, on: connection)
                } catch {
                    disagreements.append("\(predicate): PostgreSQL side failed: \(error)")
                    continue
                }
                var inMemory = Set<String>()
                for team in teams where try evaluator.evaluate(node, on: team.objectValue!, entity: "Team") {
                    inMemory.insert(team["id"]!.stringValue!)
                }
                checked += 1
                if ids != inMemory {
                    disagreements.append(
                        "\(predicate): PostgreSQL only \(ids.subtracting(inMemory).sorted()), evaluator only \(inMemory.subtracting(ids).sorted())"
                    )
                }
            }
            XCTAssertEqual(checked, 2500)
            XCTAssertTrue(
                disagreements.isEmpty,
                "\(disagreements.count) disagreements:\n" + disagreements.prefix(15).joined(separator: "\n"))
        }
    }
}
