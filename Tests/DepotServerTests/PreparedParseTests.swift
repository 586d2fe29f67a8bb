import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// A big `store/batchInsert` under the streaming size is parsed by its
/// preparation on the reader pool, not where it was received: a save of
/// another session received right after it commits first, while a later
/// write of the batch's own session still waits for it, and broken JSON is
/// answered as before.
final class PreparedParseTests: XCTestCase {
    static let model = #"""
        {"entities": [{"name": "Item", "attributes": [
          {"name": "name", "type": "string"}, {"name": "score", "type": "integer"}]}]}
        """#

    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-prep-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    /// `count` objects, about 60 bytes each: 3,000 of them make a 180 KB message, parsed by its preparation.
    private static func batch(_ count: Int, prefix: String) -> String {
        let objects = (0..<count).map { #"{"name":"\#(prefix) item number \#($0) of the batch","score":\#($0)}"# }
        return #"{"entity":"Item","objects":[\#(objects.joined(separator: ","))]}"#
    }

    private static func save(_ name: String) -> String {
        #"{"inserted":[{"entity":"Item","values":{"name":"\#(name)","score":-1}}]}"#
    }

    private func initialize(_ service: DepotService, _ outbox: RecordingOutbox, _ peer: [UInt8]) throws {
        request(service, peer, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        XCTAssertNotNil(try outbox.response(1, of: peer)["result"])
    }

    func testASaveOfAnotherSessionOvertakesABatchStillBeingParsed() throws {
        let (service, outbox) = try makeCore(in: directory, model: Self.model)
        let batcher: [UInt8] = [1]
        let saver: [UInt8] = [2]
        try initialize(service, outbox, batcher)
        try initialize(service, outbox, saver)
        let params = Self.batch(3_000, prefix: "a")
        XCTAssertGreaterThanOrEqual(params.utf8.count, DepotService.preparedMessage)
        XCTAssertLessThan(params.utf8.count, DepotService.largeMessage)

        // The order the transport hands them up in: the batch, the batcher's own save, another session's save.
        request(service, batcher, id: 2, "store/batchInsert", params)
        request(service, batcher, id: 3, "store/save", Self.save("after the batch"))
        request(service, saver, id: 2, "store/save", Self.save("behind the batch"))

        let batch = try outbox.response(2, of: batcher)
        let own = try outbox.response(3, of: batcher)
        let other = try outbox.response(2, of: saver)
        XCTAssertEqual(batch["result"]?["inserted"], 3_000, "\(batch.excerpt())")
        let batchTransaction = try XCTUnwrap(batch["result"]?["transaction"]?.intValue)
        let ownTransaction = try XCTUnwrap(own["result"]?["transaction"]?.intValue)
        let otherTransaction = try XCTUnwrap(other["result"]?["transaction"]?.intValue)
        // The other session's save did not wait for the batch's parse; the batcher's own save did.
        XCTAssertLessThan(otherTransaction, batchTransaction)
        XCTAssertGreaterThan(ownTransaction, batchTransaction)
        request(service, saver, id: 3, "store/count", #"{"entity":"Item"}"#)
        XCTAssertEqual(try outbox.response(3, of: saver)["result"]?["count"], 3_002)
    }

    func testBrokenJSONInABigRequestIsTheSameParseError() throws {
        let (service, outbox) = try makeCore(in: directory, model: Self.model)
        let peer: [UInt8] = [1]
        try initialize(service, outbox, peer)
        let good = Self.batch(1_000, prefix: "b")
        // Broken deep inside the params: the envelope reads fine, the parse fails later.
        let broken = good.replacingOccurrences(of: #""score":500}"#, with: #""score":}"#)
        let message = #"{"jsonrpc":"2.0","id":2,"method":"store/batchInsert","params":\#(broken)}"#
        XCTAssertGreaterThanOrEqual(message.utf8.count, DepotService.preparedMessage)
        service.receive(Array(message.utf8), from: peer)
        let parseError = try outbox.wait(for: peer) { $0.contains { $0["error"]?["code"] == -32700 } }
            .first { $0["error"]?["code"] == -32700 }!
        XCTAssertEqual(parseError["id"], .null)
        // The offset is the whole message's, where a parse on arrival would have found it.
        let offset = try XCTUnwrap(parseError["error"]?["data"]?["offset"]?.intValue)
        let expected: Int
        do {
            _ = try JSONParser.parse(Array(message.utf8))
            expected = -1
        } catch {
            expected = error.offset
        }
        XCTAssertEqual(offset, Int64(expected))

        // A bad envelope is an invalid request with its id, as before.
        let badVersion = #"{"jsonrpc":"1.0","id":3,"method":"store/batchInsert","params":\#(good)}"#
        service.receive(Array(badVersion.utf8), from: peer)
        let invalid = try outbox.response(3, of: peer)
        XCTAssertEqual(invalid["error"]?["code"], -32600, "\(invalid.excerpt())")

        // Nothing was written, and the session goes on.
        request(service, peer, id: 4, "store/count", #"{"entity":"Item"}"#)
        XCTAssertEqual(try outbox.response(4, of: peer)["result"]?["count"], 0)
        request(service, peer, id: 5, "store/batchInsert", good)
        XCTAssertEqual(try outbox.response(5, of: peer)["result"]?["inserted"], 1_000)
    }
}
