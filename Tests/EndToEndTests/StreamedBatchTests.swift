import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// A large `store/batchInsert` (past 256 KiB) is read one object at a time
/// from the message's bytes: the same answers as the parsed path, all or
/// nothing, whatever the order of its members and wherever its problems are.
final class StreamedBatchTests: XCTestCase {
    static func objects(_ count: Int, bad: Int? = nil) -> String {
        (0..<count).map { index in
            index == bad
                ? #"{"name":7,"createdAt":"2026-01-01T00:00:00.000Z"}"#
                : #"{"name":"item \#(index) \#(String(repeating: "x", count: 40))","createdAt":"2026-01-01T00:00:00.\#(String(format: "%03d", index % 1000))Z"}"#
        }.joined(separator: ",")
    }

    func testLargeBatchesAnswerLikeSmallOnesAndStayAllOrNothing() throws {
        let daemon = try Daemon()
        let client = try RawClient(endpoint: daemon.endpoint)
        try client.initialize()
        let model = String(
            decoding: try JSONCoding.encodeBytes(ModelDefine.Parameters(entities: [WorldCup.item])), as: UTF8.self)
        XCTAssertNotNil(try client.call("model/define", model)["result"])

        // objects before entity, and a token: read lazily all the same.
        let good = try client.call(
            "store/batchInsert", #"{"objects":[\#(Self.objects(6_000))],"workDoneToken":"t","entity":"Item"}"#)
        XCTAssertEqual(good["result"]?["inserted"], 6_000, "\(good.excerpt())")

        // One bad object deep inside: every problem named, nothing written.
        let invalid = try client.call(
            "store/batchInsert", #"{"entity":"Item","objects":[\#(Self.objects(6_000, bad: 4_321))]}"#, id: 2)
        XCTAssertEqual(invalid["error"]?["code"], .int(Int64(ErrorCode.validationFailed.rawValue)))
        XCTAssertEqual(invalid["error"]?["data"]?["errors"]?.arrayValue?.first?["object"], "objects[4321]")

        // Broken JSON past the first objects: a parse error, nothing written.
        let broken = try client.call(
            "store/batchInsert", #"{"entity":"Item","objects":[\#(Self.objects(6_000)),{"name":}]}"#, id: 3)
        XCTAssertEqual(broken["error"]?["code"], .int(Int64(ErrorCode.parseError.rawValue)), "\(broken.excerpt())")

        // Not an object among the objects; an unknown entity; objects not an array.
        let notObject = try client.call(
            "store/batchInsert", #"{"entity":"Item","objects":[\#(Self.objects(6_000)),3]}"#, id: 4)
        XCTAssertEqual(notObject["error"]?["data"]?["field"], "params.objects[6000]", "\(notObject.excerpt())")
        let unknown = try client.call(
            "store/batchInsert", #"{"entity":"Nope","objects":[\#(Self.objects(6_000))]}"#, id: 5)
        XCTAssertEqual(unknown["error"]?["data"]?["field"], "params.entity")
        let padding = String(repeating: " ", count: 300_000)
        let notArray = try client.call("store/batchInsert", #"{"entity":"Item","objects":"many"\#(padding)}"#, id: 6)
        XCTAssertEqual(
            notArray["error"]?["code"], .int(Int64(ErrorCode.invalidParams.rawValue)), "\(notArray.excerpt())")

        XCTAssertEqual(try client.call("store/count", #"{"entity":"Item"}"#, id: 7)["result"]?["count"], 6_000)
        XCTAssertNotNil(try client.call("ping", "{}", id: 8)["result"])
    }
}
