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
}
