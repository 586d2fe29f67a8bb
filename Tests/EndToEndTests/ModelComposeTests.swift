import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// `model/define` composes (DESIGN.md §4): a process defines its own entities
/// on a daemon already serving others', and they all keep working.
final class ModelComposeTests: XCTestCase {
    /// `Package`, as the README's import example defines it.
    static let package = #"""
        {"entities": [{"name": "Package", "attributes": [
           {"name": "name", "type": "string"}, {"name": "release", "type": "string"},
           {"name": "downloads", "type": "integer", "default": 0}],
         "uniquenessConstraints": [["name", "release"]]}]}
        """#

    /// Runs `depot ARGUMENTS` (a separate process) and returns its exit status and standard output.
    private func depot(_ arguments: [String], input: String? = nil) throws -> (Int32, String) {
        let outcome = try ProcessOutcome.run(Executables.depot, arguments, input: input)
        return (outcome.status, outcome.output)
    }

    func testSecondProcessDefinesItsOwnEntity() async throws {
        let daemon = try Daemon()
        let teams = try await daemon.connect(name: "teams")
        let ids = try await teams.loadWorldCup()
        let before = try await teams.call(ModelGet.self, Empty())
        let observed = ChangeCollector(teams)
        let request = FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")])
        let subscribed = try await teams.call(ResultsSubscribe.self, .init(request: request, include: .all))
        var mirror = ResultsMirror(subscribed, request: request, sectionKeyPath: nil)

        // Another process (the CLI) brings Package alone: Team stays.
        let (status, printed) = try depot(
            ["model", "apply", "--connect", daemon.endpoint, "--json", "-"], input: Self.package)
        XCTAssertEqual(status, 0, printed)
        let applied = try JSONParser.parse(printed)
        XCTAssertEqual(applied["version"]?.intValue, before.version + 1)
        XCTAssertEqual(applied["changes"]?.arrayValue?.first, "added entity Package")
        let after = try await teams.call(ModelGet.self, Empty())
        XCTAssertEqual(after.entities.map(\.name), before.entities.map(\.name) + ["Package"])
        XCTAssertEqual(Array(after.entities.prefix(before.entities.count)), before.entities)

        // Both work, from both processes' sessions.
        let importer = try await daemon.connect(name: "importer")
        _ = try await importer.call(
            StoreSave.self,
            .init(inserted: [InsertedObject(entity: "Package", values: ["name": "zmq", "release": "4.3"])]))
        let packages = try await importer.call(StoreCount.self, FetchRequest(entity: "Package"))
        XCTAssertEqual(packages.count, 1)
        let brazil = try XCTUnwrap(ids["Brazil"])
        let saved = try await importer.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: brazil, values: ["wins": 6])]))
        let change = try await observed.expect(for: mirror.subscription)
        XCTAssertEqual(change.transaction, saved.transaction)
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(teams)
        let teamCount = try await teams.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(teamCount.count, 32)
        // Defining Package again with the same definition changes nothing.
        let again = try await importer.call(
            ModelDefine.self,
            .init(entities: [after.entities.first { $0.name == "Package" }!]))
        XCTAssertEqual(again.changes, [])
        XCTAssertEqual(again.version, after.version)
    }

    /// `depotd --model` at start-up defines its entities beside those other processes brought earlier.
    func testModelFileAtStartKeepsOtherEntities() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        let package = try JSONCoding.decode(
            [EntityDescription].self, from: try JSONParser.parse(Self.package)["entities"]!)
        _ = try await client.call(ModelDefine.self, .init(entities: package))
        _ = try await client.call(
            StoreSave.self,
            .init(inserted: [InsertedObject(entity: "Package", values: ["name": "zmq", "release": "4.3"])]))
        XCTAssertEqual(daemon.stop(), 0)
        let model = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Examples/worldcup-model.json").path
        let restarted = try Daemon(dataDirectory: daemon.dataDirectory, arguments: ["--model", model])
        defer { restarted.removeData() }
        let again = try await restarted.connect()
        let names = try await again.call(ModelGet.self, Empty()).entities.map(\.name)
        XCTAssertEqual(Set(names), ["Package", "Team", "Item"])
        let packages = try await again.call(StoreCount.self, FetchRequest(entity: "Package"))
        XCTAssertEqual(packages.count, 1)
        let teams = try await again.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(teams.count, 0)
    }

    func testInvalidSecondDefineChangesNothing() async throws {
        let daemon = try Daemon()
        let first = try await daemon.connect(name: "first")
        _ = try await first.loadWorldCup()
        let before = try await first.call(ModelGet.self, Empty())
        let second = try await daemon.connect(name: "second")

        // One good entity and one whose relationship names an entity nobody defined: all or none.
        let good = EntityDescription(name: "Coach", attributes: [AttributeDescription(name: "name", type: .string)])
        let bad = EntityDescription(
            name: "Match", attributes: [AttributeDescription(name: "score", type: .string)],
            relationships: [RelationshipDescription(name: "stadium", destination: "Stadium")])
        let invalid = await assertServerError(.invalidParams) {
            try await second.call(ModelDefine.self, .init(entities: [good, bad]))
        }
        XCTAssertEqual(invalid?.data?["field"], "entities[1].relationships[0].destination")
        XCTAssertTrue(invalid?.message.contains("Stadium") == true, invalid?.message ?? "")

        // A new entity beside a change that is no lightweight migration (Team loses keys): refused, no Coach either.
        var team = try XCTUnwrap(before.entities.first { $0.name == "Team" })
        team.attributes.removeLast()
        let refused = await assertServerError(.migrationRefused) {
            try await second.call(ModelDefine.self, .init(entities: [good, team]))
        }
        XCTAssertTrue(refused?.message.contains("removing Team.") == true, refused?.message ?? "")

        // A relationship to an entity defined earlier must name an inverse that exists there.
        let player = EntityDescription(
            name: "Fan", attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "fans")])
        let inverse = await assertServerError(.invalidParams) {
            try await second.call(ModelDefine.self, .init(entities: [player]))
        }
        XCTAssertEqual(inverse?.data?["field"], "entities[0].relationships[0].inverse")

        // Removing an entity is asked explicitly, and refused.
        let removal = await assertServerError(.migrationRefused) {
            try await second.call(ModelDefine.self, .init(entities: [good], remove: ["Team"]))
        }
        XCTAssertTrue(removal?.message.contains("removing entity Team") == true, removal?.message ?? "")
        let unknown = await assertServerError(.invalidParams) {
            try await second.call(ModelDefine.self, .init(entities: [], remove: ["Ghost"]))
        }
        XCTAssertEqual(unknown?.data?["field"], "remove[0]")

        let after = try await first.call(ModelGet.self, Empty())
        XCTAssertEqual(after.version, before.version)
        XCTAssertEqual(after.entities, before.entities)
        let teamCount = try await first.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(teamCount.count, 32)
        await assertServerError(.invalidParams) {
            try await first.call(StoreCount.self, FetchRequest(entity: "Coach"))
        }

        // The relationship resolves once its destination was defined by an earlier call, inverse checked across calls.
        _ = try await second.call(
            ModelDefine.self,
            .init(entities: [
                EntityDescription(
                    name: "Stadium", attributes: [AttributeDescription(name: "city", type: .string)],
                    relationships: [
                        RelationshipDescription(name: "matches", destination: "Match", toMany: true, inverse: "stadium")
                    ]),
                EntityDescription(
                    name: "Match", attributes: [AttributeDescription(name: "score", type: .string)],
                    relationships: [
                        RelationshipDescription(name: "stadium", destination: "Stadium", inverse: "matches")
                    ]),
            ]))
        let current = try await first.call(ModelGet.self, Empty())
        var fanTeam = try XCTUnwrap(current.entities.first { $0.name == "Team" })
        fanTeam.relationships.append(
            RelationshipDescription(name: "fans", destination: "Fan", toMany: true, inverse: "team"))
        let both = try await second.call(ModelDefine.self, .init(entities: [player, fanTeam]))
        XCTAssertTrue(both.changes.contains("added entity Fan"), "\(both.changes)")
        XCTAssertTrue(both.changes.contains("added relationship Team.fans"), "\(both.changes)")
        let brazil = try await first.teamID("Brazil")
        let stadium = try await first.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Stadium", tempId: "s", values: ["city": "Paris"]),
                InsertedObject(entity: "Match", values: ["score": "3-0", "stadium": "s"]),
                InsertedObject(
                    entity: "Fan", values: ["name": "Ann", "team": .string(brazil)]),
            ]))
        XCTAssertNotNil(stadium.ids["s"])
        let brazilFans = try await first.call(
            StoreCount.self, FetchRequest(entity: "Team", predicate: "fans.@count == 1"))
        XCTAssertEqual(brazilFans.count, 1)
    }
}

extension DepotConnection {
    /// The id of the team named `name`.
    fileprivate func teamID(_ name: String) async throws -> String {
        let result = try await call(
            StoreFetch.self,
            FetchRequest(entity: "Team", predicate: "teamName == %@", arguments: [.string(name)], resultType: .ids))
        return try XCTUnwrap(result.ids?.first)
    }
}
