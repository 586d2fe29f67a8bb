import DepotClient
import Foundation
import XCTest

final class DepotObjectTests: XCTestCase {
    func testWireFormRoundTripsAndTypedAccessorsRead() throws {
        let json: JSONValue = [
            "id": "Team/42", "entity": "Team", "version": 3, "teamName": "Brazil", "wins": 5, "ratio": 0.5,
            "active": true,
            "founded": "2026-11-22T10:15:30.250Z", "imageName": nil, "captain": "Player/7",
        ]
        let team = try DepotObject(json: json)
        XCTAssertEqual(team.id, "Team/42")
        XCTAssertEqual(team.entity, "Team")
        XCTAssertEqual(team.version, 3)
        XCTAssertEqual(team.string("teamName"), "Brazil")
        XCTAssertEqual(team.int("wins"), 5)
        XCTAssertEqual(team.double("ratio"), 0.5)
        XCTAssertEqual(team.bool("active"), true)
        XCTAssertEqual(team["imageName"], .null)
        XCTAssertNil(team["missing"])
        XCTAssertEqual(team.objectID("captain"), "Player/7")
        let founded = try XCTUnwrap(team.date("founded"))
        XCTAssertEqual(founded.timeIntervalSince1970, 1_795_342_530.25, accuracy: 0.001)
        XCTAssertEqual(DepotDate.string(from: founded), "2026-11-22T10:15:30.250Z")
        XCTAssertEqual(try DepotObject(json: team.json), team)
        XCTAssertThrowsError(try DepotObject(json: ["entity": "Team"]))
    }

    func testDecodesUserTypesWithDates() throws {
        struct Item: Decodable, FetchRequestResult {
            var id: String
            var name: String
            var createdAt: Date
            var done: Bool
        }
        let object = DepotObject(
            id: "Item/1", entity: "Item", version: 1,
            values: ["name": "a", "createdAt": "2026-01-01T00:00:00Z", "done": false])
        let item = try Item(depotObject: object)
        XCTAssertEqual(item.id, "Item/1")
        XCTAssertEqual(item.createdAt, DepotDate.parse("2026-01-01T00:00:00.000Z"))
        XCTAssertThrowsError(try Item(depotObject: DepotObject.fault(id: "Item/2")))
        XCTAssertEqual(DepotObject.fault(id: "Item/2").entity, "Item")
    }

    func testFetchRequestConveniences() {
        var request = FetchRequest(
            entity: "Team", sortDescriptors: [SortDescriptor(key: "wins", ascending: false)], fetchBatchSize: 20)
        XCTAssertEqual(request.batchSize, 20)
        XCTAssertEqual(request.sortDescriptors, [SortDescriptor(key: "wins", ascending: false)])
        request.fetchBatchSize = 0
        XCTAssertNil(request.batchSize)
    }
}
