import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// A daemon restart: the connection opens a new session by itself and its users resync.
final class ClientReconnectTests: XCTestCase {
    func testConnectionAndContextRecoverAfterADaemonRestart() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let connection = try await first.connect(name: "survivor")
        let ids = try await connection.loadWorldCup()
        let firstSession = connection.serverInfo.sessionId
        let events = connection.connectionEvents()
        let context = ObjectContext(connection: connection)
        try await context.setAutomaticallyMergesChangesFromStore(true)
        _ = try await context.fetch(FetchRequest(entity: "Team"))
        let merges = context.objectsDidChange()

        XCTAssertEqual(first.stop(), 0)
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let reconnected = await ClientSupport.first(events, timeout: .seconds(30)) {
            if case .reconnected = $0 { true } else { false }
        }
        guard case .reconnected(let info) = reconnected else { return XCTFail("no .reconnected event within 30 s") }
        XCTAssertNotEqual(info.sessionId, firstSession)
        XCTAssertEqual(connection.serverInfo.sessionId, info.sessionId)

        // Calls work on the new session, and the context hears other processes again.
        let count = try await connection.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(count.count, 32)
        let other = try await second.connect(name: "other")
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Brazil"]!, values: ["wins": 11])]))
        let merged = await ClientSupport.wait(on: merges, timeout: .seconds(30)) {
            context.registeredObject(withID: ids["Brazil"]!)?.int("wins") == 11
        }
        XCTAssertTrue(merged, "the context re-registered its observer (or refreshed) after the restart")
    }

    func testACallAnsweredNotInitializedIsRetriedOnANewSession() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(listen: endpoint)
        let connection = try await first.connect()
        try await connection.loadWorldCup()
        first.stop()
        let second = try Daemon(dataDirectory: first.dataDirectory, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        // Whether the drop was seen first or the call got -32002, the answer comes from a new session.
        var count: Int?
        for _ in 0..<50 where count == nil {
            count = try? await connection.call(StoreCount.self, FetchRequest(entity: "Team")).count
            if count == nil { try await Task.sleep(for: .milliseconds(100)) }
        }
        XCTAssertEqual(count, 32)
    }

    func testFetchedResultsControllerResyncsAfterADaemonRestart() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let connection = try await first.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: ClientFetchedResultsTests.teamsRequest(), connection: connection,
            sectionNameKeyPath: "qualifyingZone")
        try await controller.performFetch()
        let changes = controller.changes()

        first.stop()
        // Changed while the daemon was down for this client: the resync must show it.
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let other = try await second.connect(name: "other")
        _ = try await other.call(StoreSave.self, .init(deleted: [DeletedObject(id: ids["Brazil"]!)]))
        // The new session resumes from the results held: one ordinary change (a reload if it cannot).
        let caughtUp = await ClientSupport.first(changes, timeout: .seconds(30))
        XCTAssertNotNil(caughtUp, "a change after the restart")
        XCTAssertEqual(controller.lastCatchUp?.resynced, false, "resumed, not resynced")
        let recovered = await ClientSupport.wait(on: changes) {
            controller.indexPath(forID: ids["Brazil"]!) == nil && controller.fetchedIDs.count == 31
        }
        XCTAssertTrue(recovered)

        // And it follows live changes again.
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Spain"]!, values: ["wins": 99])]))
        let live = await ClientSupport.wait(on: changes) {
            controller.indexPath(forID: ids["Spain"]!)
                == IndexPath(item: 0, section: controller.sections!.firstIndex { $0.name == "Europe" }!)
        }
        XCTAssertTrue(live)
    }
}
