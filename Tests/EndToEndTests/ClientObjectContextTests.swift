import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// ObjectContext against a real daemon: saves, conflicts under each merge policy, automatic merging.
final class ClientObjectContextTests: XCTestCase {
    /// Assigning through an object the context handed out is the change: the
    /// save writes it, and another connection's fresh fetch sees it.
    func testAssignmentThroughTheObjectIsSaved() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        let other = try await daemon.connect(name: "other")
        try await connection.loadWorldCup()
        let context = ObjectContext(connection: connection)
        let teams = try await context.fetch(FetchRequest(entity: "Team", predicate: "teamName == 'Brazil'"))
        var team = try XCTUnwrap(teams.first)
        XCTAssertTrue(team.managedObjectContext === context)
        team["wins"] = 42
        XCTAssertTrue(context.hasChanges, "the assignment is a change in the context")
        XCTAssertEqual(context.updatedObjects.map(\.id), [team.id])
        XCTAssertEqual(context.registeredObject(withID: team.id)?.int("wins"), 42)
        let result = try await context.save()
        XCTAssertGreaterThan(result.transaction, 0)
        XCTAssertFalse(context.hasChanges)
        let fresh = try await ObjectContext(connection: other).fetch(
            FetchRequest(entity: "Team", predicate: "teamName == 'Brazil'"))
        XCTAssertEqual(fresh.first?.int("wins"), 42)

        // The other spellings: setValue(_:forKey:), values, and an inserted object.
        let flag = "flag-\(42)"
        team.setValue(flag, forKey: "imageName")
        team.values["qualifyingZone"] = "Mars"
        var inserted = context.insert(entity: "Team", values: ["teamName": "Atlantis"])
        inserted["qualifyingZone"] = "Ocean"
        let saved = try await context.save()
        let stored = try await other.call(
            StoreGet.self, .init(ids: [team.id, try XCTUnwrap(saved.ids[inserted.id])])
        ).objects
        XCTAssertEqual(stored[0]["imageName"], "flag-42")
        XCTAssertEqual(stored[0]["qualifyingZone"], "Mars")
        XCTAssertEqual(stored[1]["qualifyingZone"], "Ocean")

        // A copy made before the save still changes the saved object (its temporary id is remembered).
        inserted["wins"] = 3
        try await context.save()
        let atlantis = try await other.call(StoreGet.self, .init(ids: [try XCTUnwrap(saved.ids[inserted.id])])).objects
        XCTAssertEqual(atlantis.first?["wins"], 3)

        // An object built by hand belongs to no context: a plain value.
        var loose = DepotObject(id: team.id, entity: "Team", values: ["wins": 1])
        loose["wins"] = 2
        XCTAssertNil(loose.managedObjectContext)
        XCTAssertFalse(context.hasChanges)
    }

    func testInsertChangeDeleteSaveAndRollback() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await connection.loadWorldCup()
        let context = ObjectContext(connection: connection)
        XCTAssertFalse(context.hasChanges)
        let teams = try await context.fetch(
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "teamName")], limit: 3
            ))
        XCTAssertEqual(teams.first?.string("teamName"), "Algeria")
        let atlantis = context.insert(entity: "Team", values: ["teamName": "Atlantis", "qualifyingZone": "Ocean"])
        context.set(4, forKey: "wins", on: teams[0])
        var second = teams[1]
        second["imageName"] = "new-flag"
        context.update(second)
        context.delete(teams[2])
        XCTAssertTrue(context.hasChanges)
        XCTAssertEqual(context.insertedObjects.map(\.id), [atlantis.id])
        XCTAssertEqual(Set(context.updatedObjects.map(\.id)), [teams[0].id, teams[1].id])
        XCTAssertEqual(context.deletedObjects.map(\.id), [teams[2].id])

        let result = try await context.save()
        XCTAssertFalse(context.hasChanges)
        let atlantisID = try XCTUnwrap(result.ids[atlantis.id])
        XCTAssertEqual(context.registeredObject(withID: atlantisID)?.string("teamName"), "Atlantis")
        XCTAssertEqual(context.registeredObject(withID: teams[0].id)?.int("wins"), 4)
        XCTAssertEqual(context.registeredObject(withID: teams[0].id)?.version, (teams[0].version ?? 0) + 1)
        let stored = try await connection.call(
            StoreGet.self, .init(ids: [atlantisID, teams[0].id, teams[1].id, teams[2].id])
        ).objects
        XCTAssertEqual(stored[0]["qualifyingZone"], "Ocean")
        XCTAssertEqual(stored[1]["wins"], 4)
        XCTAssertEqual(stored[2]["imageName"], "new-flag")
        XCTAssertEqual(stored[3], .null)

        context.set(99, forKey: "wins", on: teams[0])
        context.insert(entity: "Team", values: ["teamName": "Lemuria", "qualifyingZone": "Ocean"])
        context.rollback()
        XCTAssertFalse(context.hasChanges)
        XCTAssertEqual(context.registeredObject(withID: teams[0].id)?.int("wins"), 4)
        let empty = try await context.save()
        XCTAssertEqual(empty.transaction, 0, "nothing to save")
    }

    /// Another process changes `wins` after this context read the team; this
    /// context changes `wins` and `imageName`. Each policy decides as Core Data's does.
    func testConflictsUnderEachMergePolicy() async throws {
        let daemon = try Daemon()
        let mine = try await daemon.connect(name: "mine")
        let theirs = try await daemon.connect(name: "theirs")
        let ids = try await mine.loadWorldCup()
        let cases: [(MergePolicy, String, wins: Int64?, imageName: String?)] = [
            (.error, "Brazil", nil, nil),
            (.objectTrump, "Argentina", 70, "mine"),
            (.storeTrump, "Germany", 50, "mine"),
            (.overwrite, "France", 70, "mine"),
            (.rollback, "Spain", 50, nil),
        ]
        for (policy, name, wins, imageName) in cases {
            let id = try XCTUnwrap(ids[name])
            let context = ObjectContext(connection: mine)
            let other = ObjectContext(connection: theirs)
            let fetched = try await context.object(withID: id)
            let team = try XCTUnwrap(fetched)
            let originalImage = team.string("imageName")
            let theirFetched = try await other.object(withID: id)
            let theirCopy = try XCTUnwrap(theirFetched)
            other.set(50, forKey: "wins", on: theirCopy)
            try await other.save()

            context.set(70, forKey: "wins", on: team)
            context.set("mine", forKey: "imageName", on: team)
            if policy == .error {
                let error = await assertServerError(.mergeConflict) { try await context.save(mergePolicy: policy) }
                XCTAssertEqual(error?.data?["conflicts"]?.arrayValue?.first?["id"]?.stringValue, id)
                XCTAssertTrue(context.hasChanges, "a failed save keeps the changes")
                let stored = try await mine.call(StoreGet.self, .init(ids: [id])).objects[0]
                XCTAssertEqual(stored["wins"], 50, "\(policy)")
                continue
            }
            try await context.save(mergePolicy: policy)
            let stored = try await mine.call(StoreGet.self, .init(ids: [id])).objects[0]
            XCTAssertEqual(stored["wins"]?.intValue, wins, "\(policy)")
            XCTAssertEqual(stored["imageName"]?.stringValue, imageName ?? originalImage, "\(policy)")
            XCTAssertEqual(
                context.registeredObject(withID: id)?.json, stored,
                "after \(policy) the context shows what the store kept")
            XCTAssertFalse(context.hasChanges)
        }
    }

    func testAutomaticMergeRefreshesObjectsChangedElsewhere() async throws {
        let daemon = try Daemon()
        let mine = try await daemon.connect(name: "mine")
        let theirs = try await daemon.connect(name: "theirs")
        let ids = try await mine.loadWorldCup()
        let context = ObjectContext(connection: mine)
        try await context.setAutomaticallyMergesChangesFromStore(true)
        XCTAssertTrue(context.automaticallyMergesChangesFromStore)
        let changes = context.objectsDidChange()
        _ = try await context.fetch(FetchRequest(entity: "Team"))
        let brazil = try XCTUnwrap(context.registeredObject(withID: ids["Brazil"]!))
        context.set("local-flag", forKey: "imageName", on: brazil)

        _ = try await theirs.call(
            StoreSave.self,
            .init(
                updated: [UpdatedObject(id: ids["Brazil"]!, values: ["wins": 9])],
                deleted: [DeletedObject(id: ids["Algeria"]!)]))
        let merged = await ClientSupport.first(changes) { !$0.refreshed.isEmpty || !$0.deleted.isEmpty }
        XCTAssertEqual(merged?.refreshed, [ids["Brazil"]!])
        XCTAssertEqual(merged?.deleted, [ids["Algeria"]!])
        let refreshed = try XCTUnwrap(context.registeredObject(withID: ids["Brazil"]!))
        XCTAssertEqual(refreshed.int("wins"), 9)
        XCTAssertEqual(refreshed.version, (brazil.version ?? 0) + 1)
        XCTAssertEqual(refreshed.string("imageName"), "local-flag", "pending local changes stay on top")
        XCTAssertNil(context.registeredObject(withID: ids["Algeria"]!))

        // Saving now is not a conflict: the context's base is the store's latest.
        try await context.save()
        let stored = try await mine.call(StoreGet.self, .init(ids: [ids["Brazil"]!])).objects[0]
        XCTAssertEqual(stored["wins"], 9)
        XCTAssertEqual(stored["imageName"], "local-flag")
    }
}
