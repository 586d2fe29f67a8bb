import DepotProtocol
import GRDB
import XCTest

@testable import DepotStore

/// The save's prepared statements (``SaveStatements``): one per entity and shape, rebuilt after a model change.
final class SaveStatementsTests: XCTestCase {
    private func insertTeam(_ store: Store, _ values: [String: JSONValue]) throws -> String {
        let (result, _) = try store.save(
            StoreSave.Parameters(inserted: [InsertedObject(entity: "Team", tempId: "t", values: values)]),
            writeScope: .unrestricted)
        return try XCTUnwrap(result.ids["t"])
    }

    func testSavesOfAShapeMetBeforePrepareNothing() throws {
        let (store, _) = try makeStore()
        _ = try insertTeam(store, ["teamName": "A", "qualifyingZone": "Z", "wins": 1])
        let afterFirst = store.saveStatements.count
        XCTAssertGreaterThan(afterFirst, 0)
        for name in ["B", "C", "D"] {
            _ = try insertTeam(store, ["teamName": .string(name), "qualifyingZone": "Z", "wins": 2])
        }
        XCTAssertEqual(store.saveStatements.count, afterFirst, "the same shape reuses its statements")
        _ = try insertTeam(store, ["teamName": "E", "qualifyingZone": "Z", "imageName": "e.png"])
        XCTAssertEqual(store.saveStatements.count, afterFirst + 1, "another set of columns is another insert")
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team"), scope: .unrestricted), 5)
    }

    func testAModelChangeAfterCachedSavesStillSavesCorrectly() throws {
        let (store, _) = try makeStore()
        // Every shape of the save path, cached under the first model.
        let peru = try insertTeam(store, ["teamName": "Peru", "qualifyingZone": "CONMEBOL", "wins": 1])
        let (players, _) = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(entity: "Player", tempId: "p", values: ["name": "Cubillas", "team": .string(peru)]),
                InsertedObject(entity: "Player", tempId: "q", values: ["name": "Sotil", "team": .string(peru)]),
            ]), writeScope: .unrestricted)
        _ = try store.save(
            StoreSave.Parameters(
                updated: [UpdatedObject(id: peru, values: ["wins": 2, "imageName": "pe.png"])],
                deleted: [DeletedObject(id: players.ids["q"]!)]), writeScope: .unrestricted)
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: peru, values: ["teamName": "Perú"])]),
            writeScope: .unrestricted)
        XCTAssertGreaterThan(store.saveStatements.count, 0)

        // A new column first (the columns' positions shift) and a renamed one.
        var model = testModel
        model[0].attributes.insert(AttributeDescription(name: "coach", type: .string, defaultValue: "TBD"), at: 0)
        let image = try XCTUnwrap(model[0].attributes.firstIndex { $0.name == "imageName" })
        model[0].attributes[image].renamedFrom = "imageName"
        model[0].attributes[image].name = "flag"
        XCTAssertEqual(try store.defineModel(model).version, 2)

        // The same shapes again, and new ones, under the new model.
        let chile = try insertTeam(
            store, ["teamName": "Chile", "qualifyingZone": "CONMEBOL", "wins": 3, "coach": "Bielsa", "flag": "cl.png"])
        let uruguay = try insertTeam(store, ["teamName": "Uruguay", "qualifyingZone": "CONMEBOL", "wins": 2])
        let before = try XCTUnwrap(store.objects(ids: [peru], scope: .unrestricted).first?["version"]?.intValue)
        let (updated, _) = try store.save(
            StoreSave.Parameters(updated: [
                UpdatedObject(id: peru, version: before, values: ["wins": 4, "flag": "peru.png", "coach": "Gareca"]),
                UpdatedObject(id: uruguay, values: ["coach": "Tabárez"]),
            ]), writeScope: .unrestricted)
        XCTAssertEqual(updated.versions[peru], before + 1)
        let peruNow = try XCTUnwrap(store.objects(ids: [peru], scope: .unrestricted).first)
        XCTAssertEqual(peruNow["wins"], 4)
        XCTAssertEqual(peruNow["flag"], "peru.png")
        XCTAssertEqual(peruNow["coach"], "Gareca")
        assertRPCError(.uniqueConstraint) {
            try store.save(
                StoreSave.Parameters(updated: [UpdatedObject(id: uruguay, values: ["teamName": "Chile"])]),
                writeScope: .unrestricted)
        }
        _ = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(entity: "Player", values: ["name": "Vidal", "team": .string(chile)])
            ]), writeScope: .unrestricted)
        _ = try store.save(StoreSave.Parameters(deleted: [DeletedObject(id: peru)]), writeScope: .unrestricted)  // cascades to Cubillas

        let teams = try XCTUnwrap(
            store.fetch(FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")]), scope: .unrestricted)
                .objects)
        XCTAssertEqual(teams.map { $0["teamName"] }, ["Chile", "Uruguay"])
        XCTAssertEqual(teams[0]["coach"], "Bielsa")
        XCTAssertEqual(teams[0]["flag"], "cl.png")
        XCTAssertEqual(teams[0]["wins"], 3)
        XCTAssertEqual(teams[1]["coach"], "Tabárez")
        XCTAssertEqual(teams[1]["flag"], .null)
        XCTAssertEqual(teams[1]["wins"], 2)
        XCTAssertEqual(teams[1]["version"], 2)
        let names = try XCTUnwrap(store.fetch(FetchRequest(entity: "Player"), scope: .unrestricted).objects).map {
            $0["name"]
        }
        XCTAssertEqual(names, ["Vidal"])
    }
}
