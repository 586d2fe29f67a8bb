import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// A live `FetchedResultsController(…, persistentStore:)` whose daemon restarts (DESIGN.md §9): the
/// new session catches up from the kept results (history since their transaction, the current ids,
/// only the changed objects, one ordinary change), or resyncs in full where history no longer
/// reaches back.
final class ClientReplicaReconnectTests: XCTestCase {
    /// What the test sees of one run: the daemons come and go on one endpoint and data directory.
    private struct Setup {
        var endpoint: String
        var dataDirectory: URL
        var ids: [String: String]
        var connection: DepotConnection
        var controller: FetchedResultsController<DepotObject>
        var log: CallLog
    }

    /// A daemon with the World Cup, a live controller kept in a file, and the daemon stopped.
    @MainActor
    private func liveControllerWhoseDaemonStopped(arguments: [String] = []) async throws -> Setup {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(arguments: arguments, heartbeat: 1, listen: endpoint)
        let connection = try await DepotConnection.connect(to: first.endpoint, timeout: .seconds(5))
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: ClientFetchedResultsTests.teamsRequest(), connection: connection,
            sectionNameKeyPath: "qualifyingZone", persistentStore: file)
        let log = CallLog()
        controller.delegate = log
        try await controller.performFetch()
        XCTAssertNotNil(controller.subscription)
        let states = connection.connectionStates()
        XCTAssertEqual(first.stop(), 0)
        let down = await ClientSupport.first(states, timeout: .seconds(20)) { $0 != .connected }
        XCTAssertNotNil(down, "the connection saw the daemon go")
        return Setup(
            endpoint: endpoint, dataDirectory: first.dataDirectory, ids: ids, connection: connection,
            controller: controller, log: log)
    }

    /// Saves `saves` through a daemon on the same data directory but another endpoint (the client
    /// does not see it), then stops it: what changed while the client was away. Returns the last
    /// save's transaction.
    @discardableResult
    private static func changeWhileAway(
        _ dataDirectory: URL, arguments: [String] = [], _ saves: [StoreSave.Parameters]
    ) async throws -> Int64 {
        let meanwhile = try Daemon(dataDirectory: dataDirectory, arguments: arguments)
        let other = try await meanwhile.connect(name: "other")
        var transaction: Int64 = 0
        for save in saves { transaction = try await other.call(StoreSave.self, save).transaction }
        await other.close()
        XCTAssertEqual(meanwhile.stop(), 0)
        return transaction
    }

    /// The daemon restarts after remote changes: the controller catches up with one ordinary
    /// change (no reload), fetching only the changed objects, and that change takes the results it
    /// held to a fresh fetch, values included (the delta oracle).
    @MainActor
    func testAfterADaemonRestartALiveControllerCatchesUpWithOneOrdinaryChange() async throws {
        let setup = try await liveControllerWhoseDaemonStopped()
        let controller = setup.controller
        let oldLayout = try XCTUnwrap(controller.layout)
        let oldObjects = Dictionary(uniqueKeysWithValues: (controller.fetchedObjects ?? []).map { ($0.id, $0) })
        let reloadsBefore = setup.log.reloadCount
        let batchesBefore = setup.log.changeBatches.count
        let changes = controller.changes()

        // 50 transactions away, three of them to the results: new wins (a move), a deletion, an
        // insert into a new section.
        var saves: [StoreSave.Parameters] = (0..<47).map { index in
            .init(inserted: [
                InsertedObject(
                    entity: "Item", values: ["name": .string("item \(index)"), "createdAt": "2026-01-01T00:00:00.000Z"])
            ])
        }
        saves.insert(.init(updated: [UpdatedObject(id: setup.ids["Japan"]!, values: ["wins": 40])]), at: 5)
        saves.insert(.init(deleted: [DeletedObject(id: setup.ids["Brazil"]!)]), at: 20)
        saves.insert(
            .init(inserted: [
                InsertedObject(entity: "Team", values: ["teamName": "Fiji", "qualifyingZone": "Oceania", "wins": 1])
            ]), at: 40)
        try await Self.changeWhileAway(setup.dataDirectory, saves)

        let second = try Daemon(dataDirectory: setup.dataDirectory, heartbeat: 1, listen: setup.endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let next = await ClientSupport.first(changes, timeout: .seconds(30))
        let caughtUp = try XCTUnwrap(next, "a change after the restart")
        XCTAssertFalse(caughtUp.isReload, "one ordinary change, not a reload")
        XCTAssertEqual(setup.log.reloadCount, reloadsBefore, "the delegate heard no reload")
        XCTAssertEqual(setup.log.changeBatches.count, batchesBefore + 1, "the delegate heard one change")
        XCTAssertTrue(setup.log.changeBatches.last?.contains("object delete \(setup.ids["Brazil"]!)") ?? false)

        let record = try XCTUnwrap(controller.lastCatchUp)
        XCTAssertFalse(record.resynced)
        XCTAssertGreaterThanOrEqual(record.historyTransactions, 50)
        XCTAssertEqual(record.objectsFetched, 2, "only Japan and Fiji were fetched")
        XCTAssertNotNil(controller.subscription, "live again")

        // The oracle: the change applied to the results held before gives a fresh fetch.
        let other = try await second.connect(name: "checker")
        let fresh = try (try await other.call(StoreFetch.self, ClientFetchedResultsTests.teamsRequest()).objects ?? [])
            .map { try DepotObject(json: $0) }
        let (layout, values) = try ClientSupport.apply(caughtUp, to: oldLayout, values: oldObjects)
        XCTAssertEqual(layout.ids, fresh.map(\.id))
        XCTAssertEqual(layout.ids.map { values[$0] }, fresh.map { Optional($0) })
        XCTAssertEqual(controller.fetchedObjects, fresh)

        // And live: a save after the catch-up arrives as a delta.
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: setup.ids["Mexico"]!, values: ["wins": 9])]))
        let followed = await ClientSupport.wait(on: changes, timeout: .seconds(10)) {
            controller.indexPath(forID: setup.ids["Mexico"]!).map { controller.object(at: $0).int("wins") } == 9
        }
        XCTAssertTrue(followed)
        await setup.connection.close()
    }

    /// History pruned past the kept transaction while the daemon was away: the new session
    /// resyncs in full (a reload), and the results equal a fresh fetch.
    @MainActor
    func testAfterARestartPastTheRetainedHistoryALiveControllerResyncs() async throws {
        let retention = ["--history-retention", "5"]
        let setup = try await liveControllerWhoseDaemonStopped(arguments: retention)
        let controller = setup.controller
        let changes = controller.changes()
        // The daemon prunes every 64 transactions.
        try await Self.changeWhileAway(
            setup.dataDirectory, arguments: retention,
            (0..<70).map { wins in
                .init(updated: [UpdatedObject(id: setup.ids["Japan"]!, values: ["wins": .int(Int64(wins))])])
            })

        let second = try Daemon(
            dataDirectory: setup.dataDirectory, arguments: retention, heartbeat: 1, listen: setup.endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let next = await ClientSupport.first(changes, timeout: .seconds(30))
        XCTAssertEqual(next?.isReload, true, "a full resync is a reload")
        XCTAssertEqual(controller.lastCatchUp?.resynced, true)
        XCTAssertEqual(controller.lastCatchUp?.objectsFetched, 32)
        let other = try await second.connect(name: "checker")
        let fresh = try (try await other.call(StoreFetch.self, ClientFetchedResultsTests.teamsRequest()).objects ?? [])
            .map { try DepotObject(json: $0) }
        XCTAssertEqual(controller.fetchedObjects, fresh)
        await setup.connection.close()
    }

    /// The daemon comes back having started from its cluster's snapshot, its history beginning
    /// after the results' transaction: `store/history` refuses the catch-up with -32602 (naming
    /// `since`), and the controller resyncs in full (a reload) to a fresh fetch.
    @MainActor
    func testWhenTheRestartedDaemonsHistoryBeginsAfterTheResultsALiveControllerResyncs() async throws {
        if let store = ProcessInfo.processInfo.environment["DEPOT_TEST_STORE"], !store.isEmpty {
            throw XCTSkip("edits the daemon's SQLite file")
        }
        let setup = try await liveControllerWhoseDaemonStopped()
        let controller = setup.controller
        let changes = controller.changes()
        let latest = try await Self.changeWhileAway(
            setup.dataDirectory,
            [.init(updated: [UpdatedObject(id: setup.ids["Japan"]!, values: ["wins": 5])])])
        try DaemonFile.setHistoryBegins(latest, dataDirectory: setup.dataDirectory)

        let second = try Daemon(dataDirectory: setup.dataDirectory, heartbeat: 1, listen: setup.endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let next = await ClientSupport.first(changes, timeout: .seconds(30))
        XCTAssertEqual(next?.isReload, true, "a full resync is a reload")
        XCTAssertEqual(controller.lastCatchUp?.resynced, true)
        XCTAssertEqual(controller.lastCatchUp?.objectsFetched, 32)

        let other = try await second.connect(name: "checker")
        do {
            _ = try await other.call(StoreHistory.self, .init(since: latest - 1))
            XCTFail("history before \(latest) was answered")
        } catch {
            XCTAssertEqual(error.rpcError?.code, .invalidParams)
            XCTAssertEqual(error.rpcError?.data?["field"], "since")
        }
        let fresh = try (try await other.call(StoreFetch.self, ClientFetchedResultsTests.teamsRequest()).objects ?? [])
            .map { try DepotObject(json: $0) }
        XCTAssertEqual(controller.fetchedObjects, fresh)
        XCTAssertEqual(fresh.first { $0.id == setup.ids["Japan"]! }?.int("wins"), 5)
        await setup.connection.close()
    }
}
