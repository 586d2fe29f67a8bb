import DepotPostgres
import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import GRDB
import Logging
import PostgresNIO
import XCTest

/// The cluster's objects as PostgreSQL tables (DESIGN section 11), against a real PostgreSQL and
/// real replicas: what `SELECT` finds there is what every replica holds.
final class PostgresObjectTablesTests: XCTestCase {
    private let logger = Logger(label: "depot.tests.object-tables")

    private static let team = EntityDescription(
        name: "Team",
        attributes: [
            AttributeDescription(name: "name", type: .string),
            AttributeDescription(name: "wins", type: .integer, defaultValue: 0),
            AttributeDescription(name: "active", type: .boolean, defaultValue: true),
            AttributeDescription(name: "rating", type: .double, defaultValue: 0),
            AttributeDescription(name: "founded", type: .date, optional: true),
            AttributeDescription(name: "logo", type: .binary, optional: true),
        ],
        relationships: [
            RelationshipDescription(
                name: "players", destination: "Player", toMany: true, inverse: "team", deleteRule: .cascade),
            RelationshipDescription(name: "tags", destination: "Tag", toMany: true, inverse: "teams"),
        ],
        uniquenessConstraints: [["name"]])
    private static let player = EntityDescription(
        name: "Player", attributes: [AttributeDescription(name: "name", type: .string)],
        relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")])
    private static let tag = EntityDescription(
        name: "Tag", attributes: [AttributeDescription(name: "label", type: .string)],
        relationships: [RelationshipDescription(name: "teams", destination: "Team", toMany: true, inverse: "tags")])

    /// Random saves, batches, deletes (cascading), many-to-many pairs and model changes (new attribute,
    /// new entity, renamed attribute and entity) through two
    /// replicas, each stale now and then: every table in PostgreSQL holds exactly the rows of
    /// every replica's table (ids, values, to-one columns, pairs), and records the model.
    func testTheTablesInPostgreSQLHoldWhatEveryReplicaHolds() throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = uniqueSchema("tables")
        let replications = try (0..<2).map { try PostgresReplication(url: url, node: "daemon-\($0)") }
        defer { replications.forEach { $0.stop() } }
        let opened = try replications.map(TestReplica.open)
        let (stores, paths) = (opened.map(\.0), opened.map(\.1))
        _ = try stores[0].defineModel([Self.team, Self.player, Self.tag])

        var random = SeededGenerator(seed: 26)
        var teams: [String] = []
        var players: [String] = []
        var tags: [String] = []
        var committed = 0
        var remodelled = false
        var tagKey = "label"
        for step in 0..<160 {
            let store = stores[Int.random(in: 0...1, using: &random)]
            var team = Self.team
            team.attributes.append(AttributeDescription(name: "city", type: .string, optional: true))
            let coach = EntityDescription(
                name: "Coach", attributes: [AttributeDescription(name: "name", type: .string)])
            switch step {
            case 40:
                // Batches: more rows than one read of the changed rows takes (500).
                let bulk = (0..<1_200).map { ["name": JSONValue.string("bulk \($0)")] }
                _ = try store.batchInsert(
                    BatchInsert.Parameters(entity: "Player", objects: bulk), writeScope: .unrestricted)
                continue
            case 100:
                _ = try store.batchUpdate(
                    BatchUpdate.Parameters(entity: "Team", predicate: "wins < 100", values: ["wins": 7]),
                    readScope: .unrestricted, writeScope: .unrestricted)
                continue
            case 140:
                _ = try store.batchDelete(
                    BatchDelete.Parameters(entity: "Player", predicate: "name BEGINSWITH 'bulk 1'"),
                    readScope: .unrestricted, writeScope: .unrestricted)
                continue
            default:
                break
            }
            if step == 80 {
                // A model change: a new attribute and a new entity.
                _ = try store.defineModel([team, Self.player, Self.tag, coach])
                remodelled = true
                continue
            }
            if step == 120 {
                // Renames: an attribute that holds values, and an entity.
                var tag = Self.tag
                tag.attributes[0] = AttributeDescription(name: "title", type: .string, renamedFrom: "label")
                var manager = coach
                manager.name = "Manager"
                manager.renamedFrom = "Coach"
                _ = try store.defineModel([team, Self.player, tag, manager])
                tagKey = "title"
                continue
            }
            var parameters = StoreSave.Parameters()
            var operation = Int.random(in: 0..<7, using: &random)
            if operation == 0 { operation = tags.count < 3 ? 1 : 2 }
            switch operation {
            case 1:
                parameters.inserted = [
                    InsertedObject(entity: "Tag", tempId: "new", values: [tagKey: .string("tag \(step)")])
                ]
            case 2:
                var values: [String: JSONValue] = [
                    "name": .string("team \(Int.random(in: 0..<60, using: &random))"),  // sometimes taken
                    "wins": .int(Int64.random(in: -5...500, using: &random)),
                    "active": .bool(Bool.random(using: &random)),
                    "rating": .double(Double(Int.random(in: 0..<10_000, using: &random)) / 7),
                    "tags": .array(tags.filter { _ in Bool.random(using: &random) }.map(JSONValue.string)),
                ]
                if Bool.random(using: &random) {
                    values["founded"] = .string("2026-11-\(10 + step % 18)T10:15:30.250Z")
                }
                if Bool.random(using: &random) {
                    values["logo"] = .string(
                        Data((0..<8).map { _ in UInt8.random(in: 0...255, using: &random) })
                            .base64EncodedString())
                }
                if remodelled, Bool.random(using: &random) { values["city"] = .string("city \(step)") }
                parameters.inserted = [InsertedObject(entity: "Team", tempId: "new", values: values)]
            case 3 where !teams.isEmpty:
                parameters.inserted = [
                    InsertedObject(
                        entity: "Player", tempId: "new",
                        values: [
                            "name": .string("player \(step)"), "team": .string(teams.randomElement(using: &random)!),
                        ])
                ]
            case 4 where !teams.isEmpty:
                var values: [String: JSONValue] = [
                    "wins": .int(Int64.random(in: 0...500, using: &random)),
                    "active": .bool(Bool.random(using: &random)),
                    "tags": .array(tags.filter { _ in Bool.random(using: &random) }.map(JSONValue.string)),
                ]
                if Bool.random(using: &random) { values["logo"] = .null }
                parameters.updated = [UpdatedObject(id: teams.randomElement(using: &random)!, values: values)]
            case 5 where !teams.isEmpty:
                let id = teams.randomElement(using: &random)!
                parameters.deleted = [DeletedObject(id: id)]
            case 6 where !players.isEmpty:
                parameters.deleted = [DeletedObject(id: players.randomElement(using: &random)!)]
            default:
                continue
            }
            do {
                let (result, _) = try store.save(parameters, writeScope: .unrestricted)
                committed += 1
                if let id = result.ids["new"] {
                    if id.hasPrefix("Team/") { teams.append(id) }
                    if id.hasPrefix("Player/") { players.append(id) }
                    if id.hasPrefix("Tag/") { tags.append(id) }
                }
                for deleted in parameters.deleted {
                    teams.removeAll { $0 == deleted.id }
                    players.removeAll { $0 == deleted.id }
                }
            } catch {
                // A name already taken, or an object the other replica deleted: nothing is written.
                guard error.code == .uniqueConstraint || error.code == .notFound else { throw error }
                if error.code == .notFound {
                    let gone = Set(parameters.updated.map(\.id) + parameters.deleted.map(\.id))
                    teams.removeAll { gone.contains($0) }
                    players.removeAll { gone.contains($0) }
                }
            }
            if step % 9 == 0 { try stores[Int.random(in: 0...1, using: &random)].catchUpWithCluster() }
        }
        XCTAssertGreaterThan(committed, 80, "most steps must commit")
        for store in stores { try store.catchUpWithCluster() }

        let postgres = try tablesInPostgreSQL(url: url, server: server)
        XCTAssertEqual(
            Set(postgres.keys), ["e_Team", "e_Player", "e_Tag", "e_Manager", "j_Tag.teams"],
            "one table per entity and pair")
        XCTAssertGreaterThan(postgres["e_Team"]?.count ?? 0, 5)
        XCTAssertEqual(
            postgres["e_Player"]?.filter { $0["name"]?.stringValue?.hasPrefix("bulk") ?? false }.count, 1_200 - 311,
            "the batch insert, less the batch delete")
        XCTAssertGreaterThan(postgres["j_Tag.teams"]?.count ?? 0, 0, "some pairs")
        XCTAssertTrue(postgres["e_Team"]?.contains { $0["city"] != nil && $0["city"] != .null } ?? false)
        XCTAssertTrue(postgres["e_Tag"]?.allSatisfy { $0["title"] != nil && $0["label"] == nil } ?? false)
        for (index, path) in paths.enumerated() {
            let replica = try tablesInReplica(path)
            XCTAssertEqual(Set(replica.keys), Set(postgres.keys), "replica \(index)")
            for (table, rows) in replica {
                let mirrored = postgres[table] ?? []
                XCTAssertEqual(mirrored.count, rows.count, "replica \(index), rows of \(table)")
                if let first = zip(mirrored, rows).first(where: { $0 != $1 }) {
                    XCTFail("replica \(index), table \(table): PostgreSQL has \(first.0), the replica \(first.1)")
                }
            }
        }
        let modelTable = "\"\(url.schema)\".object_model"
        let model = try server.withConnectionBlocking { connection, logger in
            let rows = try await connection.query(
                "SELECT version FROM \(unescaped: modelTable)", logger: logger)
            return try await rows.collect().first?.decode(Int64.self)
        }
        XCTAssertEqual(model, stores[0].schema.version)
    }

    /// A replica with an empty data directory starts from the tables and the position they
    /// reflect, not from the log: it holds every row, its history begins at the snapshot, ids
    /// deleted before it joined are not given again, and it follows and writes like the others.
    func testANewReplicaStartsFromTheTablesAndFollowsTheLog() throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = uniqueSchema("joining")
        let first = try PostgresReplication(url: url, node: "first")
        defer { first.stop() }
        let firstPath = TestReplica.temporaryPath()
        let store = try Store(path: firstPath, replication: first)
        _ = try store.defineModel([Self.team, Self.player, Self.tag])
        var teams: [String] = []
        for index in 0..<40 {
            let saved = try store.save(
                StoreSave.Parameters(inserted: [
                    InsertedObject(
                        entity: "Team", tempId: "t",
                        values: ["name": .string("team \(index)"), "active": .bool(index % 2 == 0)]),
                    InsertedObject(entity: "Tag", tempId: "g", values: ["label": .string("tag \(index)")]),
                ]), writeScope: .unrestricted
            ).0.ids
            teams.append(saved["t"]!)
            _ = try store.save(
                StoreSave.Parameters(updated: [UpdatedObject(id: saved["t"]!, values: ["tags": [.string(saved["g"]!)]])]
                ), writeScope: .unrestricted)
        }
        // The newest team is deleted: its id must never come back.
        _ = try store.save(
            StoreSave.Parameters(deleted: [DeletedObject(id: teams.removeLast())]), writeScope: .unrestricted)
        let latest = try store.latestTransaction()

        let joining = try PostgresReplication(url: url, node: "joining")
        defer { joining.stop() }
        let joinedPath = TestReplica.temporaryPath()
        let joined = try Store(path: joinedPath, replication: joining)
        XCTAssertEqual(joined.replicaPosition, store.replicaPosition, "at the head, from the snapshot")
        XCTAssertEqual(try joined.historyBegins(), latest)
        XCTAssertEqual(try joined.history(since: 0, limit: nil).transactions, [], "no history replayed")
        XCTAssertEqual(try joined.latestTransaction(), latest)
        XCTAssertEqual(joined.schema.version, store.schema.version)
        XCTAssertEqual(try tablesInReplica(joinedPath), try tablesInReplica(firstPath))
        // The checksum it kept while loading is that of its rows read back, and the log's.
        let checksums = try TestReplica.checksums(joinedPath)
        XCTAssertEqual(checksums.recorded, checksums.full)
        XCTAssertEqual(checksums.offset, "0", "the snapshot's tables agree with the log")

        // It follows the log from there, and writes through it.
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: teams[0], values: ["wins": 9])]), writeScope: .unrestricted
        )
        try joined.catchUpWithCluster()
        let (saved, transaction) = try joined.save(
            StoreSave.Parameters(inserted: [InsertedObject(entity: "Team", tempId: "n", values: ["name": "new"])]),
            writeScope: .unrestricted)
        XCTAssertEqual(saved.ids["n"], "Team/41", "after the deleted Team/40")
        XCTAssertEqual(transaction?.number, latest + 2)
        XCTAssertEqual(try joined.history(since: latest, limit: nil).transactions.count, 2)
        try store.catchUpWithCluster()
        XCTAssertEqual(try tablesInReplica(joinedPath), try tablesInReplica(firstPath))
        XCTAssertEqual(
            try joined.history(since: latest, limit: nil).transactions,
            try store.history(since: latest, limit: nil).transactions)
    }

    // MARK: Helpers

    /// The rows of every object table in PostgreSQL, by table, ordered by key, each value normalized.
    private func tablesInPostgreSQL(url: PostgresURL, server: PostgresServer) throws -> [String: [[String: JSONValue]]]
    {
        try server.withConnectionBlocking { connection, logger in
            var tables: [String: [[String: JSONValue]]] = [:]
            let names = try await connection.query(
                """
                SELECT tablename FROM pg_tables
                WHERE schemaname = \(url.schema) AND (tablename LIKE 'e\\_%' OR tablename LIKE 'j\\_%')
                """, logger: logger
            ).collect().map { try $0.decode(String.self) }
            for name in names {
                let table = "\"\(url.schema)\".\"\(name)\""
                let order = name.hasPrefix("j_") ? "a, b" : "id"
                let rows = try await connection.query(
                    PostgresQuery(unsafeSQL: "SELECT to_jsonb(t)::text FROM \(table) t ORDER BY \(order)"),
                    logger: logger)
                var decoded: [[String: JSONValue]] = []
                for try await json in rows.decode(String.self) {
                    guard case .object(let row) = try JSONParser.parse(json) else { continue }
                    decoded.append(row.mapValues(Self.normalized))
                }
                tables[name] = decoded
            }
            return tables
        }
    }

    /// The rows of every object table of the replica at `path`, as ``tablesInPostgreSQL(url:server:)`` gives them.
    private func tablesInReplica(_ path: String) throws -> [String: [[String: JSONValue]]] {
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        return try queue.read { db in
            var tables: [String: [[String: JSONValue]]] = [:]
            let names = try String.fetchAll(
                db,
                sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND (name GLOB 'e_*' OR name GLOB 'j_*')")
            for name in names {
                let order = name.hasPrefix("j_") ? "a, b" : "id"
                tables[name] = try Row.fetchAll(db, sql: "SELECT * FROM \"\(name)\" ORDER BY \(order)").map { row in
                    Dictionary(
                        row.map { column, value -> (String, JSONValue) in
                            switch value.storage {
                            case .null: (column, .null)
                            case .int64(let number): (column, .double(Double(number)))
                            case .double(let number): (column, .double(number))
                            case .string(let text): (column, .string(text))
                            case .blob(let data):
                                (column, .string("\\x" + data.map { String(format: "%02x", $0) }.joined()))
                            }
                        }, uniquingKeysWith: { first, _ in first })
                }
            }
            return tables
        }
    }

    /// Numbers as doubles and booleans as 0/1, as SQLite holds them.
    private static func normalized(_ value: JSONValue) -> JSONValue {
        switch value {
        case .int(let number): .double(Double(number))
        case .bool(let flag): .double(flag ? 1 : 0)
        default: value
        }
    }
}
