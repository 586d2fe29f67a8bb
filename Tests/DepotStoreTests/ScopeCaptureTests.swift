import DepotProtocol
import XCTest

@testable import DepotStore

/// History records, with each change of an entity whose keys row-level scopes
/// read, those keys' values before and after (``ScopeCapture``), whatever
/// path wrote them: saves, cascades, inverse relationships, batch operations,
/// and across a model migration.
final class ScopeCaptureTests: XCTestCase {
    /// The recorded values of `entity` in each transaction after `since`.
    private func recorded(_ store: Store, since: Int64, entity: String) throws -> [RecordedValues?] {
        var found: [RecordedValues?] = []
        _ = try store.history(since: since, limit: 100) { entry in
            if let set = entry.changes[entity] { found.append(set.recorded) }
            return nil
        }
        return found
    }

    func testEveryWritePathRecordsTheValuesBeforeAndAfter() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Before any key is recorded, nothing is.
        let early = try store.insertTeam("Early", zone: "A")
        XCTAssertEqual(try recorded(store, since: 0, entity: "Team"), [nil])
        store.recordScopeValues(of: ["Team": ["qualifyingZone", "wins"], "Player": ["team"]])
        let start = try store.latestTransaction()

        // Insert, update, and a delete that cascades to a player (whose team was set through the inverse).
        let (saved, _) = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(entity: "Team", tempId: "t", values: ["teamName": "Red", "qualifyingZone": "B"]),
                InsertedObject(entity: "Player", tempId: "p", values: ["name": "Ann", "team": "t"]),
            ]), writeScope: .unrestricted)
        let red = try XCTUnwrap(ObjectID(saved.ids["t"]!))
        let ann = try XCTUnwrap(ObjectID(saved.ids["p"]!))
        _ = try store.save(
            StoreSave.Parameters(updated: [
                UpdatedObject(id: red.description, values: ["wins": 3]),
                UpdatedObject(id: early, values: ["qualifyingZone": "C"]),
            ]), writeScope: .unrestricted)
        _ = try store.batchUpdate(
            BatchUpdate.Parameters(entity: "Team", predicate: "wins == 3", values: ["wins": 4]),
            readScope: .unrestricted, writeScope: .unrestricted)
        _ = try store.save(
            StoreSave.Parameters(deleted: [DeletedObject(id: red.description)]), writeScope: .unrestricted)

        let teams = try recorded(store, since: start, entity: "Team")
        XCTAssertEqual(teams.count, 4)
        XCTAssertEqual(teams.first??.keys, ["qualifyingZone", "wins"])
        XCTAssertEqual(teams[0]?.rows[red.row], .init(before: nil, after: ["B", 0]), "an insert")
        XCTAssertEqual(teams[1]?.rows[red.row], .init(before: ["B", 0], after: ["B", 3]), "a save's update")
        let earlyRow = try XCTUnwrap(ObjectID(early)).row
        XCTAssertEqual(teams[1]?.rows[earlyRow], .init(before: ["A", 0], after: ["C", 0]))
        XCTAssertEqual(teams[2]?.rows[red.row], .init(before: ["B", 3], after: ["B", 4]), "a batch update")
        XCTAssertEqual(teams[3]?.rows[red.row], .init(before: ["B", 4], after: nil), "a delete")
        let players = try recorded(store, since: start, entity: "Player")
        XCTAssertEqual(players.first??.rows[ann.row], .init(before: nil, after: [.string(red.description)]))
        XCTAssertEqual(
            players.last??.rows[ann.row], .init(before: [.string(red.description)], after: nil), "a cascaded delete")

        // A migration drops the capture (it may drop the columns it reads); it is back for the next write.
        var model = testModel
        model[0].attributes.append(AttributeDescription(name: "stars", type: .integer, defaultValue: 0))
        _ = try store.defineModel(model)
        let migrated = try store.latestTransaction()
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: early, values: ["wins": 9])]), writeScope: .unrestricted)
        XCTAssertEqual(
            try recorded(store, since: migrated, entity: "Team").first??.rows[earlyRow],
            .init(before: ["C", 0], after: ["C", 9]))

        // A write that fails records nothing and leaves no captured value behind for the next one.
        // (the write rule is checked after the writes, so the update ran and fired the capture).
        let rule = WriteScope.Rule(predicate: try PredicateParser.parse("wins < 10"), text: "wins < 10")
        assertRPCError(.forbidden) {
            try store.save(
                StoreSave.Parameters(updated: [UpdatedObject(id: early, values: ["wins": 10])]),
                writeScope: WriteScope(rules: ["Team": rule], keyName: "k"))
        }
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: early, values: ["qualifyingZone": "D"])]),
            writeScope: .unrestricted)
        XCTAssertEqual(
            try recorded(store, since: migrated + 1, entity: "Team").first??.rows[earlyRow],
            .init(before: ["C", 9], after: ["D", 9]))
    }
}
