import DepotProtocol
import Foundation
import XCTest

@testable import DepotStore

/// The store reports its own commits (``Store/takeCommittedTransactions()``): what committed, once,
/// in commit order, and nothing that rolled back.
final class CommitStreamTests: XCTestCase {
    func testEveryCommittedWriteIsReportedOnceInOrder() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let france = try store.insertTeam("France", zone: "Europe", wins: 3)
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": 4])]), writeScope: .unrestricted)
        _ = try store.batchInsert(
            BatchInsert.Parameters(
                entity: "Team", objects: [["teamName": "Japan", "qualifyingZone": "Asia"]]), writeScope: .unrestricted)
        _ = try store.batchUpdate(
            BatchUpdate.Parameters(entity: "Team", values: ["wins": 9]), readScope: .unrestricted,
            writeScope: .unrestricted)
        let stream = store.takeCommittedTransactions()
        XCTAssertEqual(stream.map(\.number), [1, 2, 3, 4])
        XCTAssertEqual(stream[1].changes["Team"]?.updated.map(\.row), [1], "the update of France")
        XCTAssertTrue(store.takeCommittedTransactions().isEmpty, "taken once")
    }

    func testACommitCarriesItsRowsImagesForTheEntitiesAskedFor() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let france = try store.insertTeam("France", zone: "Europe", wins: 3)
        XCTAssertEqual(store.takeCommittedTransactions().first?.images.isEmpty, true, "none asked for")
        store.captureRowImages(of: ["Team"])
        let japan = try store.insertTeam("Japan", zone: "Asia")
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": 4])]), writeScope: .unrestricted)
        _ = try store.save(StoreSave.Parameters(deleted: [DeletedObject(id: japan)]), writeScope: .unrestricted)
        try store.writeGroup { group in
            for wins: Int64 in [5, 6] {
                _ = try? store.save(
                    StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": .int(wins)])]), in: group,
                    writeScope: .unrestricted)
            }
        }
        let stream = store.takeCommittedTransactions()
        XCTAssertEqual(stream.count, 5)
        let images = stream.map { $0.images["Team"] }
        XCTAssertEqual(images[0]?.count, 1, "the inserted row")
        XCTAssertEqual(images[0]?.first?.value.object["teamName"], "Japan")
        XCTAssertEqual(images[1]?[1]?.object["wins"], 4, "the value right after the update")
        XCTAssertEqual(images[1]?[1]?.sortValues["wins"], .integer(4))
        XCTAssertEqual(images[2]?.isEmpty, true, "a deleted row has no image")
        XCTAssertEqual(images[3]?[1]?.object["wins"], 5, "each save of a group, as it left the row")
        XCTAssertEqual(images[4]?[1]?.object["wins"], 6)
    }

    func testAFailedSaveAndANoOpReportNothing() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let france = try store.insertTeam("France", zone: "Europe")
        _ = store.takeCommittedTransactions()
        // Rolled back: the second insert breaks the uniqueness of teamName.
        assertRPCError(.uniqueConstraint) {
            try store.save(
                StoreSave.Parameters(inserted: [
                    InsertedObject(entity: "Team", values: ["teamName": "Japan", "qualifyingZone": "Asia"]),
                    InsertedObject(entity: "Team", values: ["teamName": "France", "qualifyingZone": "Asia"]),
                ]), writeScope: .unrestricted)
        }
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": 0])]), writeScope: .unrestricted)
        XCTAssertTrue(store.takeCommittedTransactions().isEmpty)
        let recorded = store.recordedTransactions
        _ = try store.insertTeam("Japan", zone: "Asia")
        XCTAssertEqual(store.recordedTransactions, recorded + 1)
        XCTAssertEqual(store.takeCommittedTransactions().map(\.number), [2])
    }

    func testAGroupReportsTheSavesThatKeptTheirSavepointsOnlyOnceItCommits() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        try store.writeGroup { group in
            for name in ["France", "France", "Japan"] {
                _ = try? store.save(
                    StoreSave.Parameters(inserted: [
                        InsertedObject(entity: "Team", values: ["teamName": .string(name), "qualifyingZone": "Z"])
                    ]), in: group, writeScope: .unrestricted)
            }
            XCTAssertTrue(store.takeCommittedTransactions().isEmpty, "nothing before the group commits")
        }
        XCTAssertEqual(
            store.takeCommittedTransactions().map { $0.changes["Team"]?.inserted.count }, [1, 1],
            "the second France failed in its savepoint and is not reported")
    }
}
