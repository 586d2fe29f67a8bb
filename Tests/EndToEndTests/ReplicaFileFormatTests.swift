import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Client replica files made by earlier builds (DESIGN.md §9: the file records its format and
/// model version), kept in `Tests/Fixtures/upgrade/`: every later format must open them.
///
/// `replica-format-1.sqlite` was written by `OfflineExample` of the release before the format
/// was recorded: `--once` (the World Cup table, sectioned by zone, from a controller), then
/// `--increment Brazil` twice, the second with the daemon stopped (queued). It is opened here with
/// the daemon out of reach.
final class ReplicaFileFormatTests: XCTestCase {
    private var file: URL!

    override func setUpWithError() throws {
        file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        try FileManager.default.copyItem(
            at: Fixtures.directory.appendingPathComponent("upgrade/replica-format-1.sqlite"), to: file)
    }

    override func tearDownWithError() throws {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file.path + suffix) }
    }

    /// The request `OfflineExample` keeps its table under.
    private static let request = FetchRequest(
        entity: "Team",
        sort: [
            SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false),
            SortDescriptor(key: "teamName"),
        ])

    func testAFormatOneReplicaFileOpensWithItsResultsObjectsAndQueuedSave() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let connection = try DepotConnection.open(to: endpoint, timeout: .seconds(5))
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: Self.request, connection: connection, sectionNameKeyPath: "qualifyingZone",
            persistentStore: file)
        try await controller.performFetch()
        XCTAssertNil(controller.subscription, "served from the file")
        XCTAssertEqual(controller.fetchedObjects?.count, 32)
        XCTAssertEqual(
            controller.sections?.map(\.name), ["Africa", "Asia", "Europe", "North America", "South America"])
        XCTAssertNil(controller.persistentStoreError)

        let context = try ObjectContext(connection: connection, persistentStore: file)
        let pending = try context.pendingSaves()
        XCTAssertEqual(pending.count, 1, "the save queued offline")
        let brazilID = try XCTUnwrap(pending.first?.updated.first?.id)
        let brazil = try await context.fetch(FetchRequest(entity: "Team", predicate: "teamName == 'Brazil'"))
        XCTAssertEqual(brazil.map(\.id), [brazilID])
        XCTAssertEqual(brazil.first?.int("wins"), pending.first?.updated.first?.values["wins"]?.intValue.map(Int.init))
        await connection.close()
    }

    func testAReplicaFileOfANewerFormatIsRefusedNotMisread() throws {
        // What a later build would leave: a migration this one does not know.
        let newer = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        defer { try? FileManager.default.removeItem(at: newer) }
        try FileManager.default.copyItem(
            at: Fixtures.directory.appendingPathComponent("upgrade/replica-format-99.sqlite"), to: newer)
        let connection = try DepotConnection.open(to: "tcp://127.0.0.1:1", timeout: .seconds(1))
        do {
            _ = try ObjectContext(connection: connection, persistentStore: newer)
            XCTFail("a newer replica file was opened")
        } catch {
            guard case .persistentStore(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("replica format 99"), message)
            XCTAssertTrue(message.contains("newer than format 2"), message)
        }
    }
}
