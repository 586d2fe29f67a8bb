import DepotProtocol
import GRDB
import XCTest

@testable import DepotStore

final class SaveTests: XCTestCase {
    func testInsertFetchAndVersions() throws {
        let (store, _) = try makeStore()
        let (result, transaction) = try store.save(
            StoreSave.Parameters(
                inserted: [
                    InsertedObject(
                        entity: "Team", tempId: "br",
                        values: ["teamName": "Brazil", "qualifyingZone": "CONMEBOL", "wins": 5]),
                    InsertedObject(entity: "Player", tempId: "p1", values: ["name": "Pelé", "team": "br"]),
                ], author: "test"))
        let team = try XCTUnwrap(result.ids["br"])
        XCTAssertEqual(result.versions[team], 1)
        XCTAssertEqual(transaction?.number, result.transaction)
        XCTAssertEqual(transaction?.changes["Team"]?.inserted.count, 1)
        let fetched = try store.fetch(FetchRequest(entity: "Team", properties: ["teamName", "players"]))
        XCTAssertEqual(fetched.objects?.first?["teamName"], "Brazil")
        XCTAssertEqual(fetched.objects?.first?["players"], .array([.string(result.ids["p1"]!)]))
        XCTAssertNil(fetched.objects?.first?["version"], "properties narrow the object to the named keys")
        XCTAssertEqual(try store.fetch(FetchRequest(entity: "Team")).objects?.first?["version"], 1)

        let (update, _) = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: team, version: 1, values: ["wins": 6])]))
        XCTAssertEqual(update.versions[team], 2)
        let objects = try store.objects(ids: [team, "Team/999"])
        XCTAssertEqual(objects[0]["wins"], 6)
        XCTAssertEqual(objects[1], .null)
    }

    func testValidationReportsEveryProblemAndWritesNothing() throws {
        let (store, _) = try makeStore()
        let error = assertRPCError(.validationFailed) {
            try store.save(
                StoreSave.Parameters(inserted: [
                    InsertedObject(entity: "Team", values: ["teamName": 3, "qualifyingZone": "UEFA", "color": "red"]),
                    InsertedObject(entity: "Team", values: ["qualifyingZone": "UEFA"]),
                    InsertedObject(entity: "Nope", values: [:]),
                ]))
        }
        XCTAssertEqual(error?.data?["errors"]?.arrayValue?.count, 4)
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team")), 0)
        XCTAssertEqual(try store.latestTransaction(), 0)
    }

    func testUniquenessErrorAndUpsert() throws {
        let (store, _) = try makeStore()
        let brazil = try store.insertTeam("Brazil", zone: "CONMEBOL", wins: 1)
        assertRPCError(.uniqueConstraint) { try store.insertTeam("Brazil", zone: "CONMEBOL") }
        let (result, _) = try store.save(
            StoreSave.Parameters(
                inserted: [
                    InsertedObject(
                        entity: "Team", tempId: "x",
                        values: ["teamName": "Brazil", "qualifyingZone": "CONMEBOL", "wins": 9])
                ], mergePolicy: .objectTrump))
        XCTAssertEqual(result.ids["x"], brazil)
        XCTAssertEqual(try store.objects(ids: [brazil])[0]["wins"], 9)
        let (kept, _) = try store.save(
            StoreSave.Parameters(
                inserted: [
                    InsertedObject(
                        entity: "Team", tempId: "y",
                        values: ["teamName": "Brazil", "qualifyingZone": "CONMEBOL", "wins": 1])
                ], mergePolicy: .storeTrump))
        XCTAssertEqual(kept.ids["y"], brazil)
        XCTAssertEqual(try store.objects(ids: [brazil])[0]["wins"], 9)
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team")), 1)
    }

    func testMergePolicies() throws {
        let (store, _) = try makeStore()
        let team = try store.insertTeam("Chile", zone: "CONMEBOL", wins: 1)
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: team, values: ["wins": 2, "imageName": "a"])]))
        let stale = UpdatedObject(
            id: team, version: 1, original: ["wins": 1], values: ["wins": 5, "qualifyingZone": "X"])
        let conflict = assertRPCError(.mergeConflict) { try store.save(StoreSave.Parameters(updated: [stale])) }
        XCTAssertEqual(conflict?.data?["conflicts"]?.arrayValue?.first?["keys"], ["wins"])
        XCTAssertEqual(conflict?.data?["conflicts"]?.arrayValue?.first?["storeValues"]?["wins"], 2)

        _ = try store.save(StoreSave.Parameters(updated: [stale], mergePolicy: .storeTrump))
        var object = try store.objects(ids: [team])[0]
        XCTAssertEqual(object["wins"], 2)
        XCTAssertEqual(object["qualifyingZone"], "X")

        _ = try store.save(
            StoreSave.Parameters(
                updated: [UpdatedObject(id: team, version: 1, values: ["wins": 7])], mergePolicy: .rollback))
        XCTAssertEqual(try store.objects(ids: [team])[0]["wins"], 2)

        _ = try store.save(
            StoreSave.Parameters(
                updated: [UpdatedObject(id: team, version: 1, values: ["wins": 7])], mergePolicy: .objectTrump))
        object = try store.objects(ids: [team])[0]
        XCTAssertEqual(object["wins"], 7)
    }

    func testDeleteRules() throws {
        let (store, _) = try makeStore()
        let (result, _) = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(
                    entity: "Team", tempId: "t", values: ["teamName": "Peru", "qualifyingZone": "CONMEBOL"]),
                InsertedObject(entity: "Player", tempId: "a", values: ["name": "A", "team": "t"]),
                InsertedObject(entity: "Player", tempId: "b", values: ["name": "B", "team": "t"]),
            ]))
        let (_, transaction) = try store.save(StoreSave.Parameters(deleted: [DeletedObject(id: result.ids["t"]!)]))
        XCTAssertEqual(try store.count(FetchRequest(entity: "Player")), 0)
        XCTAssertEqual(transaction?.changes["Player"]?.deleted.count, 2)
        assertRPCError(.notFound) {
            try store.save(StoreSave.Parameters(deleted: [DeletedObject(id: result.ids["t"]!)]))
        }
    }

    func testMigration() throws {
        let (store, _) = try makeStore()
        _ = try store.insertTeam("Peru", zone: "CONMEBOL")
        var model = testModel
        model[0].attributes.append(AttributeDescription(name: "coach", type: .string, defaultValue: "TBD"))
        model[0].attributes[3].renamedFrom = "imageName"
        model[0].attributes[3].name = "flag"
        let result = try store.defineModel(model)
        XCTAssertEqual(result.version, 2)
        XCTAssertTrue(result.changes.contains("added attribute Team.coach"))
        XCTAssertEqual(try store.fetch(FetchRequest(entity: "Team")).objects?.first?["coach"], "TBD")
        var refused = model
        refused[0].attributes[0].type = .integer
        assertRPCError(.migrationRefused) { try store.defineModel(refused) }
        XCTAssertEqual(store.model().version, 2)
        XCTAssertEqual(try store.defineModel(model).changes, [])
    }

    func testHistory() throws {
        let (store, _) = try makeStore()
        _ = try store.insertTeam("A", zone: "Z")
        _ = try store.insertTeam("B", zone: "Z")
        let history = try store.history(since: 1, limit: nil)
        XCTAssertEqual(history.transactions.map(\.transaction), [2])
        XCTAssertEqual(history.latest, 2)
    }
}
