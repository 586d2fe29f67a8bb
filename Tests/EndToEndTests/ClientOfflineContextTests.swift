import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// `ObjectContext(…, persistentStore:)` with real daemons that the tests stop and start (DESIGN.md
/// §9): reads from the file while the daemon is away, saves queued durably and replayed in order
/// under their own `saveId` and merge policy, failures reported and kept.
final class ClientOfflineContextTests: XCTestCase {
    private static let teams = FetchRequest(entity: "Team", sortDescriptors: [SortDescriptor(key: "teamName")])

    /// Waits until `condition` holds, polling; false after `timeout`.
    private func eventually(_ timeout: Duration = .seconds(30), _ condition: () throws -> Bool) async rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try condition() { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return try condition()
    }

    private func waitUntilOffline(_ connection: DepotConnection) async {
        let states = connection.connectionStates()
        _ = await ClientSupport.first(states, timeout: .seconds(20)) { $0 != .connected }
    }

    /// An edit while the daemon is stopped, the client "killed" and started again on the same file
    /// with the daemon still down, then the daemon back: the saves replay once, in order, and another
    /// client's live results show them.
    func testOfflineSavesSurviveAClientRestartAndReplayOnceWhenTheDaemonReturns() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-context-\(UUID()).sqlite")
        var connection: DepotConnection? = try await DepotConnection.connect(to: endpoint, timeout: .seconds(5))
        let ids = try await connection!.loadWorldCup()
        let japanID = try XCTUnwrap(ids["Japan"])
        var context: ObjectContext? = try ObjectContext(connection: connection!, persistentStore: file)
        let online = try await context!.fetch(Self.teams)
        XCTAssertEqual(online.count, 32)

        XCTAssertEqual(first.stop(), 0)
        await waitUntilOffline(connection!)
        // Reads come from the file.
        let asia = try await context!.fetch(
            FetchRequest(
                entity: "Team", predicate: "qualifyingZone == %@", arguments: ["Asia"],
                sortDescriptors: [SortDescriptor(key: "teamName")]))
        XCTAssertEqual(asia.map { $0.string("teamName") }, ["Australia", "Iran", "Japan", "South Korea"])
        // Two saves, queued: the second changes an object the first inserted.
        var japan = try XCTUnwrap(asia.first { $0.id == japanID })
        japan["wins"] = 17
        let fiji = context!.insert(entity: "Team", values: ["teamName": "Fiji", "qualifyingZone": "Oceania"])
        let firstSave = try await context!.save()
        XCTAssertTrue(firstSave.isPending)
        context!.set(3, forKey: "wins", on: fiji)
        context!.set(18, forKey: "wins", on: japan)
        let secondSave = try await context!.save(mergePolicy: .objectTrump)
        XCTAssertTrue(secondSave.isPending)
        XCTAssertNotEqual(firstSave.saveId, secondSave.saveId)
        XCTAssertEqual(try context!.pendingSaves().map(\.saveId), [firstSave.saveId, secondSave.saveId])
        XCTAssertEqual(try context!.pendingSaves().map(\.mergePolicy), [.error, .objectTrump])
        XCTAssertFalse(context!.hasChanges)

        // The client is killed: a new process opens the same file, the daemon still down.
        connection!.abort()
        context = nil
        connection = nil
        let reopenedConnection = try DepotConnection.open(to: endpoint, timeout: .seconds(5))
        let reopened = try ObjectContext(connection: reopenedConnection, persistentStore: file)
        XCTAssertEqual(try reopened.pendingSaves().map(\.saveId), [firstSave.saveId, secondSave.saveId])
        let japanOffline = try await reopened.object(withID: japanID)
        XCTAssertEqual(japanOffline?.int("wins"), 18, "the queued edit, read from the file")
        let oceania = try await reopened.fetch(
            FetchRequest(entity: "Team", predicate: "qualifyingZone == 'Oceania'", sortDescriptors: []))
        XCTAssertEqual(oceania.map { $0.string("teamName") }, ["Fiji"])
        XCTAssertEqual(oceania.first?.int("wins"), 3)

        // The daemon returns; another client watches.
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let other = try await second.connect(name: "other")
        let watched = FetchedResultsController<DepotObject>(
            fetchRequest: FetchRequest(
                entity: "Team", predicate: "qualifyingZone == 'Oceania' OR teamName == 'Japan'",
                sortDescriptors: [SortDescriptor(key: "teamName")]),
            connection: other)
        let changes = watched.changes()
        try await watched.performFetch()
        let replayed = try await eventually { try reopened.pendingSaves().isEmpty }
        XCTAssertTrue(replayed, "the queue emptied once the daemon was back")
        let seen = await ClientSupport.wait(on: changes, timeout: .seconds(20)) {
            watched.fetchedObjects?.map { "\($0.string("teamName")!):\($0.int("wins")!)" } == ["Fiji:3", "Japan:18"]
        }
        XCTAssertTrue(seen, "the other client's live results show both saves")

        // Exactly once: resending either save (as a replay whose answer was lost would) changes nothing.
        let stored = try await other.call(StoreFetch.self, Self.teams).objects ?? []
        let history = try await other.call(StoreHistory.self, .init(since: 0, limit: 10_000))
        let fijis = stored.filter { $0["teamName"]?.stringValue == "Fiji" }
        XCTAssertEqual(fijis.count, 1)
        let fijiID = try XCTUnwrap(fijis.first?["id"]?.stringValue)
        XCTAssertEqual(reopened.registeredObject(withID: fijiID)?.int("wins"), 3, "the context moved Fiji to its id")
        XCTAssertNil(reopened.registeredObject(withID: fiji.id), "no temporary copy left")
        XCTAssertNil(reopened.persistentStoreError)
        XCTAssertEqual(history.transactions.count, 3, "the load, and each queued save once")
    }

    /// Saves queued against a store that changed meanwhile, under each merge policy: the ones the
    /// daemon refuses come out of `failedSaves()` (and stay until dismissed, for a later context
    /// too); the others apply under their policy; one whose answer was lost is not applied twice.
    func testReplaysUnderEachMergePolicyAndEveryFailureSurfaces() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-context-\(UUID()).sqlite")
        let connection = try await DepotConnection.connect(to: endpoint, timeout: .seconds(5))
        let ids = try await connection.loadWorldCup()
        let context = try ObjectContext(connection: connection, persistentStore: file)
        _ = try await context.fetch(Self.teams)
        XCTAssertEqual(first.stop(), 0)
        await waitUntilOffline(connection)

        func edit(_ team: String, _ values: [String: JSONValue]) async throws {
            let object = try await context.object(withID: ids[team]!)
            for (key, value) in values { context.set(value, forKey: key, on: try XCTUnwrap(object)) }
        }
        try await edit("Japan", ["wins": 5])
        let conflict = try await context.save(mergePolicy: .error)
        context.insert(entity: "Team", values: ["teamName": "Brazil", "qualifyingZone": "Oceania"])
        let duplicate = try await context.save(mergePolicy: .error)
        try await edit("Iran", ["wins": 3])
        let objectTrump = try await context.save(mergePolicy: .objectTrump)
        try await edit("Mexico", ["wins": 4])
        let storeTrump = try await context.save(mergePolicy: .storeTrump)
        context.insert(entity: "Team", values: ["teamName": "Fiji", "qualifyingZone": "Oceania"])
        let lostAnswer = try await context.save(mergePolicy: .objectTrump)
        context.insert(entity: "Team", values: ["teamName": "Samoa", "qualifyingZone": "Oceania"])
        let upsert = try await context.save(mergePolicy: .objectTrump)
        try await edit("Chile", ["wins": 6])
        let rollback = try await context.save(mergePolicy: .rollback)
        try await edit("Ghana", ["wins": 7])
        let overwrite = try await context.save(mergePolicy: .overwrite)
        for save in [conflict, duplicate, objectTrump, storeTrump, lostAnswer, upsert, rollback, overwrite] {
            XCTAssertTrue(save.isPending)
        }
        let queued = try context.pendingSaves()
        XCTAssertEqual(queued.count, 8)

        // Meanwhile another client changes the same objects (a daemon on another endpoint, same data),
        // and the `lostAnswer` save reaches the store without the context hearing back.
        do {
            let elsewhere = try Daemon(dataDirectory: first.dataDirectory)
            let other = try await elsewhere.connect(name: "other")
            _ = try await other.call(
                StoreSave.self,
                .init(
                    inserted: [
                        InsertedObject(entity: "Team", values: ["teamName": "Samoa", "qualifyingZone": "Oceania"])
                    ],
                    updated: ["Japan", "Iran", "Mexico", "Chile", "Ghana"].map {
                        UpdatedObject(id: ids[$0]!, values: ["wins": 9])
                    }))
            _ = try await other.call(StoreSave.self, queued[4])
            await other.close()
            XCTAssertEqual(elsewhere.stop(), 0)
        }

        let failures = context.failedSaves()
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        var refused: [FailedSave] = []
        for await failure in failures {
            refused.append(failure)
            if refused.count == 2 { break }
        }
        XCTAssertEqual(refused.map(\.change.saveId), [conflict.saveId, duplicate.saveId])
        XCTAssertEqual(refused.map(\.error.code), [.mergeConflict, .uniqueConstraint])
        XCTAssertEqual(refused.first?.change.updated.first?.values["wins"], 5, "the change comes with the error")
        let drained = try await eventually { try context.pendingSaves().isEmpty }
        XCTAssertTrue(drained)

        let other = try await second.connect(name: "check")
        let teams = try await other.call(StoreFetch.self, Self.teams).objects ?? []
        func wins(_ name: String) -> Int64? {
            teams.first { $0["teamName"]?.stringValue == name }?["wins"]?.intValue
        }
        XCTAssertEqual(wins("Japan"), 9, "the refused save changed nothing")
        XCTAssertEqual(wins("Iran"), 3, "objectTrump: the save's value won")
        XCTAssertEqual(wins("Mexico"), 9, "storeTrump: the store's changed value won")
        XCTAssertEqual(wins("Chile"), 9, "rollback: the conflicting change was dropped")
        XCTAssertEqual(wins("Ghana"), 7, "overwrite: the save's object won")
        XCTAssertEqual(teams.filter { $0["teamName"]?.stringValue == "Fiji" }.count, 1, "applied once")
        XCTAssertEqual(teams.filter { $0["teamName"]?.stringValue == "Samoa" }.count, 1, "merged into the existing one")
        XCTAssertEqual(teams.filter { $0["teamName"]?.stringValue == "Brazil" }.count, 1)
        let refreshed = try await eventually { context.registeredObject(withID: ids["Japan"]!)?.int("wins") == 9 }
        XCTAssertTrue(refreshed, "the context shows what the store kept")

        // The failures stay in the file until dismissed, for a later context too.
        let later = try ObjectContext(connection: other, persistentStore: file)
        var kept: [FailedSave] = []
        for await failure in later.failedSaves() {
            kept.append(failure)
            if kept.count == 2 { break }
        }
        XCTAssertEqual(kept, refused)
        try later.dismissFailedSave(kept[0])
        let remaining = await ClientSupport.first(later.failedSaves(), timeout: .seconds(5))
        XCTAssertEqual(remaining, kept[1])
    }
}
