import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// `FetchedResultsController(…, persistentStore:)` against a real daemon (DESIGN.md §9, the first
/// piece of the client's replica): results kept in a local SQLite file are shown by the next
/// controller before the daemon answers, then replaced by the daemon's.
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
        let live = await ClientSupport.first(stored, timeout: .seconds(10))
        XCTAssertEqual(live?.isReload, true, "the daemon's results replaced the stored ones")
        XCTAssertNotNil(again.subscription)
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
    }
}
