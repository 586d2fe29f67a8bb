import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// `FetchedResultsController(…, persistentStore:)` against a real daemon (DESIGN.md §9, the
/// client's replica): results kept in a local SQLite file are shown by the next controller before
/// the daemon answers, then caught up with what changed since (or resynced where history no
/// longer reaches back).
final class ClientPersistentStoreTests: XCTestCase {
    func testStoredResultsShowBeforeTheDaemonAnswersThenTheLiveOnesReplaceThem() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        let asia = FetchRequest(
            entity: "Team", predicate: "qualifyingZone == 'Asia'", sortDescriptors: [SortDescriptor(key: "teamName")])

        // A first run: two controllers share the file; a change after the fetch is written back too.
        let teams = FetchedResultsController<DepotObject>(
            fetchRequest: ClientFetchedResultsTests.teamsRequest(), connection: connection,
            sectionNameKeyPath: "qualifyingZone", persistentStore: file)
        let asian = FetchedResultsController<DepotObject>(
            fetchRequest: asia, connection: connection, persistentStore: file)
        try await teams.performFetch()
        try await asian.performFetch()
        let changes = teams.changes()
        _ = try await connection.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Brazil"]!, values: ["wins": 99])]))
        let changed = await ClientSupport.first(changes)
        XCTAssertNotNil(changed)
        XCTAssertNil(teams.persistentStoreError)
        let firstRun = (teams.layout, asian.layout)
        await teams.unsubscribe()
        await asian.unsubscribe()

        // The next run, with the daemon frozen (SIGSTOP): the stored results come first.
        let again = FetchedResultsController<DepotObject>(
            fetchRequest: ClientFetchedResultsTests.teamsRequest(), connection: connection,
            sectionNameKeyPath: "qualifyingZone", persistentStore: file)
        let stored = again.changes()
        kill(daemon.process.processIdentifier, SIGSTOP)
        let fetch = Task { () -> DepotClientError? in
            do throws(DepotClientError) {
                try await again.performFetch()
                return nil
            } catch {
                return error
            }
        }
        let shown = await ClientSupport.first(stored, timeout: .seconds(10))
        XCTAssertEqual(shown?.isReload, true, "the stored results were announced as a reload")
        XCTAssertNil(again.subscription, "no answer from the daemon yet")
        XCTAssertEqual(again.layout?.sections, firstRun.0?.sections)
        XCTAssertEqual(again.sections?.map(\.name), ["Africa", "Asia", "Europe", "North America", "South America"])
        let brazil = try XCTUnwrap(again.indexPath(forID: ids["Brazil"]!))
        XCTAssertEqual(again.object(at: brazil).int("wins"), 99, "the values as last seen")
        kill(daemon.process.processIdentifier, SIGCONT)
        let failure = await fetch.value
        XCTAssertNil(failure)
        XCTAssertNotNil(again.subscription)
        XCTAssertEqual(again.lastCatchUp?.resynced, false, "caught up from the stored transaction")
        XCTAssertEqual(again.lastCatchUp?.objectsFetched, 0, "nothing changed since")
        let fresh = try await connection.call(StoreFetch.self, ClientFetchedResultsTests.teamsRequest())
        XCTAssertEqual(again.fetchedIDs, fresh.objects?.compactMap { $0["id"]?.stringValue })

        // The other controller's results are its own, in the same file.
        let asianAgain = FetchedResultsController<DepotObject>(
            fetchRequest: asia, connection: connection, persistentStore: file)
        let asianChanges = asianAgain.changes()
        try await asianAgain.performFetch()
        let asianStored = await ClientSupport.first(asianChanges, timeout: .seconds(10))
        XCTAssertEqual(asianStored?.snapshot.layout.sections, firstRun.1?.sections)
        XCTAssertEqual(asianAgain.fetchedIDs.count, 4)
    }

    /// The daemon stopped: `performFetch()` shows the stored results and returns; once the daemon
    /// is back the controller subscribes by itself, with what changed meanwhile.
    func testWithTheDaemonStoppedTheStoredResultsShowAndTheLiveOnesFollowItsReturn() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let connection = try await DepotConnection.connect(to: first.endpoint, timeout: .seconds(2))
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        let request = ClientFetchedResultsTests.teamsRequest()
        let before = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        try await before.performFetch()
        await before.unsubscribe()

        XCTAssertEqual(first.stop(), 0)
        let offline = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        let changes = offline.changes()
        try await offline.performFetch()
        XCTAssertNil(offline.subscription, "the daemon is away")
        XCTAssertEqual(offline.fetchedIDs, before.fetchedIDs, "the stored results")
        XCTAssertEqual(offline.fetchedObjects?.count, 32)

        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let other = try await second.connect(name: "other")
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Japan"]!, values: ["wins": 42])]))
        let followed = await ClientSupport.wait(on: changes, timeout: .seconds(30)) {
            offline.subscription != nil
        }
        XCTAssertTrue(followed, "subscribed once the daemon was back")
        let fresh = try await other.call(StoreFetch.self, request)
        let live = await ClientSupport.wait(on: changes, timeout: .seconds(10)) {
            offline.fetchedIDs == fresh.objects?.compactMap { $0["id"]?.stringValue }
        }
        XCTAssertTrue(live, "the live results, Japan's new wins included")
        let japan = try XCTUnwrap(offline.indexPath(forID: ids["Japan"]!))
        XCTAssertEqual(offline.object(at: japan).int("wins"), 42)
        XCTAssertEqual(offline.lastCatchUp?.resynced, false, "caught up, not resynced")
        XCTAssertEqual(offline.lastCatchUp?.objectsFetched, 1, "only Japan was fetched")
    }

    /// A cold start with the daemon down: `DepotConnection.open` returns at once, `performFetch()`
    /// serves the stored results without waiting, and once the daemon starts the connection opens
    /// its session by itself and the controller catches up.
    func testAColdStartWithTheDaemonDownServesTheFileThenCatchesUpWhenItStarts() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let ids: [String: String]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        let request = ClientFetchedResultsTests.teamsRequest()
        let storedIDs: [String]
        do {
            let connection = try await DepotConnection.connect(to: first.endpoint, timeout: .seconds(2))
            try await ClientSupport.requireFetchedResults(connection)
            ids = try await connection.loadWorldCup()
            let before = FetchedResultsController<DepotObject>(
                fetchRequest: request, connection: connection, persistentStore: file)
            try await before.performFetch()
            storedIDs = before.fetchedIDs
            await before.unsubscribe()
            await connection.close()
        }
        XCTAssertEqual(first.stop(), 0)

        // A new process, in effect: a new connection and controller, the daemon down.
        let connection = try DepotConnection.open(to: endpoint, timeout: .seconds(5))
        XCTAssertEqual(connection.state, .reconnecting, "no session yet")
        let states = connection.connectionStates()
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        let changes = controller.changes()
        let started = ContinuousClock.now
        try await controller.performFetch()
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(2), "served from the file without waiting")
        XCTAssertNil(controller.subscription)
        XCTAssertEqual(controller.fetchedIDs, storedIDs)
        XCTAssertEqual(controller.fetchedObjects?.count, 32)

        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let connected = await ClientSupport.first(states, timeout: .seconds(30)) { $0 == .connected }
        XCTAssertEqual(connected, .connected, "the session opened by itself")
        let other = try await second.connect(name: "other")
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Mexico"]!, values: ["wins": 7])]))
        let fresh = try await other.call(StoreFetch.self, request)
        let live = await ClientSupport.wait(on: changes, timeout: .seconds(30)) {
            controller.subscription != nil
                && controller.fetchedIDs == fresh.objects?.compactMap { $0["id"]?.stringValue }
        }
        XCTAssertTrue(live, "caught up and live, Mexico's new wins included")
        XCTAssertEqual(controller.lastCatchUp?.resynced, false)
        let mexico = try XCTUnwrap(controller.indexPath(forID: ids["Mexico"]!))
        XCTAssertEqual(controller.object(at: mexico).int("wins"), 7)
    }

    /// 1,000 remote transactions while the controller was away, a few of them to its results: the
    /// next `performFetch()` fetches only the objects that changed, and its one ordinary change takes
    /// the stored results exactly to a fresh fetch (the delta oracle).
    func testCatchUpFetchesOnlyTheChangedObjectsAndItsChangeReachesAFreshFetch() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        let request = ClientFetchedResultsTests.teamsRequest()
        let before = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone",
            persistentStore: file)
        try await before.performFetch()
        let oldLayout = try XCTUnwrap(before.layout)
        let oldObjects = Dictionary(uniqueKeysWithValues: (before.fetchedObjects ?? []).map { ($0.id, $0) })
        await before.unsubscribe()

        // Meanwhile: 1,000 transactions, of which a handful touch the results (a new section, a
        // team moving into it, a deletion, new wins reordering sections, two inserts).
        let other = try await daemon.connect(name: "other")
        var random = SeededGenerator(seed: 1000)
        let teamChanges: [Int: StoreSave.Parameters] = [
            100: .init(updated: [UpdatedObject(id: ids["Japan"]!, values: ["wins": 40])]),
            250: .init(updated: [UpdatedObject(id: ids["Australia"]!, values: ["qualifyingZone": "Oceania"])]),
            400: .init(deleted: [DeletedObject(id: ids["Brazil"]!)]),
            550: .init(inserted: [
                InsertedObject(entity: "Team", values: ["teamName": "Fiji", "qualifyingZone": "Oceania", "wins": 1])
            ]),
            700: .init(updated: [UpdatedObject(id: ids["Germany"]!, values: ["teamName": "Deutschland"])]),
            850: .init(inserted: [
                InsertedObject(entity: "Team", values: ["teamName": "Zambia", "qualifyingZone": "Africa", "wins": 99])
            ]),
            900: .init(updated: [UpdatedObject(id: ids["Japan"]!, values: ["wins": 2])]),
        ]
        for index in 0..<1000 {
            let save =
                teamChanges[index]
                ?? .init(inserted: [
                    InsertedObject(
                        entity: "Item",
                        values: [
                            "name": .string("item \(Int.random(in: 0..<1_000_000, using: &random))"),
                            "createdAt": "2026-01-01T00:00:00.000Z",
                        ])
                ])
            _ = try await other.call(StoreSave.self, save)
        }

        let after = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone",
            persistentStore: file)
        let changes = after.changes()
        try await after.performFetch()
        let shown = await ClientSupport.first(changes, timeout: .seconds(10))
        XCTAssertEqual(shown?.isReload, true, "the stored results first")
        XCTAssertEqual(shown?.snapshot.layout.sections, oldLayout.sections)
        let next = await ClientSupport.first(changes, timeout: .seconds(10))
        let caughtUp = try XCTUnwrap(next)
        XCTAssertFalse(caughtUp.isReload, "one ordinary change")

        let record = try XCTUnwrap(after.lastCatchUp)
        XCTAssertFalse(record.resynced)
        XCTAssertGreaterThanOrEqual(record.historyTransactions, 1000)
        // Japan, Australia, Fiji, Deutschland, Zambia: the changed objects still in the results.
        XCTAssertEqual(record.objectsFetched, 5, "only the changed objects were fetched")

        // The oracle: the change applied to the stored results gives a fresh fetch, values included.
        let (layout, values) = try ClientSupport.apply(caughtUp, to: oldLayout, values: oldObjects)
        let fresh = try await other.call(StoreFetch.self, request).objects ?? []
        let freshObjects = try fresh.map { try DepotObject(json: $0) }
        XCTAssertEqual(layout.ids, freshObjects.map(\.id))
        XCTAssertEqual(
            layout.sections.map(\.name), ["Africa", "Asia", "Europe", "North America", "Oceania", "South America"])
        XCTAssertEqual(layout.ids.map { values[$0] }, freshObjects.map { Optional($0) })
        XCTAssertEqual(after.fetchedObjects, freshObjects)

        // What the catch-up wrote back (only what changed) is what a later start reads, daemon or not.
        await after.unsubscribe()
        let nowhere = try DepotConnection.open(to: "tcp://127.0.0.1:\(try ClientSupport.freePort())")
        let offline = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: nowhere, sectionNameKeyPath: "qualifyingZone", persistentStore: file)
        try await offline.performFetch()
        XCTAssertNil(offline.subscription)
        XCTAssertEqual(offline.layout?.sections, layout.sections)
        XCTAssertEqual(offline.fetchedObjects, freshObjects)
        nowhere.abort()
    }

    /// History pruned past the stored transaction: the controller resyncs in full, reported as a reload.
    func testWhenHistoryNoLongerReachesBackTheControllerResyncs() async throws {
        let daemon = try Daemon(arguments: ["--history-retention", "5"])
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        let request = ClientFetchedResultsTests.teamsRequest()
        let before = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        try await before.performFetch()
        await before.unsubscribe()
        // The daemon prunes every 64 transactions.
        for wins in 0..<70 {
            _ = try await connection.call(
                StoreSave.self, .init(updated: [UpdatedObject(id: ids["Japan"]!, values: ["wins": .int(Int64(wins))])]))
        }

        let after = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        let changes = after.changes()
        try await after.performFetch()
        let shown = await ClientSupport.first(changes, timeout: .seconds(10))
        let resynced = await ClientSupport.first(changes, timeout: .seconds(10))
        XCTAssertEqual(shown?.isReload, true)
        XCTAssertEqual(resynced?.isReload, true, "a full resync is a reload")
        XCTAssertEqual(after.lastCatchUp?.resynced, true)
        XCTAssertEqual(after.lastCatchUp?.objectsFetched, 32)
        let fresh = try await connection.call(StoreFetch.self, request).objects ?? []
        XCTAssertEqual(after.fetchedObjects, try fresh.map { try DepotObject(json: $0) })
    }
}
