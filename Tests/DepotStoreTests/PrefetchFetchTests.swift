import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// `store/fetch` with `prefetch` (DESIGN.md §5, Prefetching): `related` holds
/// every object the key paths reach from the answered rows, once each, checked
/// against an in-memory walk of the whole store; bad paths name themselves;
/// a read scope leaves out what it hides, and nothing is followed from it.
final class PrefetchFetchTests: XCTestCase {
    private var directory: URL!
    private var store: Store!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-prefetch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        store = try Store(path: directory.appendingPathComponent("depot.sqlite").path)
        _ = try store.defineModel(PrefetchFixture.entities)
        try seed()
    }

    override func tearDownWithError() throws {
        store = nil
        try? FileManager.default.removeItem(at: directory)
    }

    /// Two coaches, four teams (one without a coach), players, tags shared by
    /// teams, and matches between them (one without an away team).
    private func seed() throws {
        var inserted: [InsertedObject] = []
        func add(_ entity: String, _ tempId: String, _ values: [String: JSONValue]) {
            inserted.append(InsertedObject(entity: entity, tempId: tempId, values: values))
        }
        add("Coach", "c0", ["name": "Ana"])
        add("Coach", "c1", ["name": "Bo"])
        for team in 0..<4 {
            var values: [String: JSONValue] = ["teamName": .string("T\(team)"), "zone": team < 2 ? "EU" : "SA"]
            if team < 3 { values["coach"] = .string("c\(team % 2)") }
            values["tags"] = .array(team == 3 ? [] : [.string("g\(team % 2)"), "g2"])
            add("Team", "t\(team)", values)
            for player in 0..<team {
                add("Player", "p\(team)\(player)", ["name": .string("P\(team)\(player)"), "team": .string("t\(team)")])
            }
        }
        for tag in 0..<3 { add("Tag", "g\(tag)", ["label": .string("L\(tag)")]) }
        for match in 0..<6 {
            var values: [String: JSONValue] = ["round": match < 3 ? "group" : "final", "score": .int(Int64(match))]
            values["homeTeam"] = .string("t\(match % 4)")
            if match != 5 { values["awayTeam"] = .string("t\((match + 1) % 4)") }
            add("Match", "m\(match)", values)
        }
        _ = try store.save(StoreSave.Parameters(inserted: inserted), writeScope: .unrestricted)
    }

    /// Every object with all its keys.
    private func graph() throws -> PrefetchFixture.Graph {
        var graph: PrefetchFixture.Graph = [:]
        for entity in PrefetchFixture.entities {
            let keys = entity.attributes.map(\.name) + entity.relationships.map(\.name)
            for object in try store.fetch(FetchRequest(entity: entity.name, properties: keys), scope: .unrestricted).objects ?? [] {
                guard let members = object.objectValue, let id = object["id"]?.stringValue else { continue }
                graph[id] = members
            }
        }
        return graph
    }

    private func checkRelated(
        _ request: FetchRequest, scope: ReadScope = .unrestricted, visible: ((String) -> Bool)? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let result = try store.fetch(request, scope: scope)
        let graph = try graph()
        let ids = result.ids ?? (result.objects ?? []).compactMap { $0["id"]?.stringValue }
        let rows = ids.compactMap { graph[$0] }
        let expected = PrefetchFixture.reached(
            from: rows, paths: request.prefetch ?? [], graph: graph, visible: visible)
        let related = try XCTUnwrap(result.related, file: file, line: line)
        XCTAssertEqual(Set(related.keys), expected, "\(request.prefetch ?? [])", file: file, line: line)
        for (id, object) in related {
            XCTAssertEqual(object["id"]?.stringValue, id, file: file, line: line)
            // Its values are the object's own, version included.
            let plain = try store.objects(ids: [id], scope: .unrestricted)[0]
            for (key, value) in plain.objectValue ?? [:] {
                XCTAssertEqual(object[key], value, "\(id).\(key)", file: file, line: line)
            }
        }
    }

    func testToOneChainsToManyAndManyToMany() throws {
        let sorted = [SortDescriptor(key: "score")]
        try checkRelated(FetchRequest(entity: "Match", sort: sorted, prefetch: ["homeTeam"]))
        try checkRelated(FetchRequest(entity: "Match", sort: sorted, prefetch: ["homeTeam.coach", "awayTeam"]))
        try checkRelated(
            FetchRequest(entity: "Match", sort: sorted, prefetch: ["homeTeam.players", "awayTeam.tags.teams"]))
        try checkRelated(
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "teamName")], prefetch: ["players", "tags", "coach.teams"]))
        try checkRelated(
            FetchRequest(
                entity: "Match", predicate: "round == 'final'", sort: sorted, limit: 2, prefetch: ["homeTeam.coach"]))
        try checkRelated(FetchRequest(entity: "Match", predicate: "score > 100", prefetch: ["homeTeam"]))
        try checkRelated(FetchRequest(entity: "Match", sort: sorted, resultType: .ids, prefetch: ["awayTeam.players"]))
    }

    func testRowsCarryTheirPrefetchedRelationshipsAndRelatedObjectsTheNextHop() throws {
        let result = try store.fetch(
            FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")], prefetch: ["players", "tags.teams"]),
            scope: .unrestricted)
        let rows = result.objects ?? []
        XCTAssertEqual(rows.count, 4)
        // The rows keep version (a whole object) and gain the to-many keys they were prefetched through.
        XCTAssertNotNil(rows[0]["version"])
        XCTAssertEqual(rows[2]["players"]?.arrayValue?.count, 2)
        XCTAssertNotNil(rows[0]["tags"]?.arrayValue)
        let tag = try XCTUnwrap(result.related?.values.first { $0["entity"] == "Tag" })
        XCTAssertNotNil(tag["teams"]?.arrayValue, "a related object carries the to-many the next hop follows")
        let player = try XCTUnwrap(result.related?.values.first { $0["entity"] == "Player" })
        XCTAssertNil(player["tags"])

        // With properties, the prefetched relationship is added to them.
        let narrow = try store.fetch(
            FetchRequest(
                entity: "Match", sort: [SortDescriptor(key: "score")], properties: ["score"], prefetch: ["homeTeam"]),
            scope: .unrestricted)
        XCTAssertEqual(
            Set(narrow.objects?[0].objectValue?.keys.map { $0 } ?? []), ["id", "entity", "score", "homeTeam"])
        XCTAssertEqual(narrow.related?.count, 4)
    }

    func testBadKeyPathsAreNamed() throws {
        for (paths, index, word) in [
            (["homeTeam", "nope"], 1, "nope"), (["homeTeam.teamName"], 0, "teamName"), ([""], 0, "''"),
            (["score"], 0, "score"), (["homeTeam..coach"], 0, "''"),
        ] {
            XCTAssertThrowsError(try store.fetch(FetchRequest(entity: "Match", prefetch: paths), scope: .unrestricted)) { error in
                let error = error as? RPCError
                XCTAssertEqual(error?.code, .invalidParams, "\(paths)")
                XCTAssertEqual(error?.data?["field"], .string("params.prefetch[\(index)]"), "\(paths)")
                XCTAssertTrue(error?.message.contains(word) == true || word == "''", "\(error?.message ?? "")")
            }
        }
        XCTAssertThrowsError(
            try store.fetch(FetchRequest(entity: "Match", groupBy: ["round"], prefetch: ["homeTeam"]), scope: .unrestricted)
        ) { error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.prefetch")
        }
    }

    func testAScopeLeavesOutWhatItHidesAndWhatIsOnlyReachedThroughIt() throws {
        // A key that reads only the EU teams, and only coaches named Ana.
        let request = FetchRequest(
            entity: "Match", sort: [SortDescriptor(key: "score")], prefetch: ["homeTeam.coach", "awayTeam.players"])
        let scope = ReadScope(rules: [
            "Team": try PredicateParser.parse("zone == 'EU'", arguments: nil),
            "Coach": try PredicateParser.parse("name == 'Ana'", arguments: nil),
        ])
        let graph = try graph()
        try checkRelated(request, scope: scope) { id in
            guard let object = graph[id] else { return false }
            switch object["entity"] {
            case "Team": return object["zone"] == "EU"
            case "Coach": return object["name"] == "Ana"
            default: return true
            }
        }
        let related = try store.fetch(request, scope: scope).related ?? [:]
        XCTAssertFalse(related.values.contains { $0["entity"] == "Team" && $0["zone"] != "EU" })
        XCTAssertFalse(related.values.contains { $0["entity"] == "Coach" && $0["name"] != "Ana" })
        XCTAssertTrue(related.values.contains { $0["entity"] == "Coach" })
    }
}
