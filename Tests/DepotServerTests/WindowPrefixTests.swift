import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// Windows hold the window, not the table (issue 34): a window with a limit
/// holds its first `offset + limit + margin` rows and refills from the store
/// when changes take away more than its margin. Random saves that move rows
/// across the window's edge, delete runs of its top rows and insert rows ahead
/// of it; after each, every window's results (first answer plus deltas) equal
/// a fresh fetch, and the daemon holds no more than the window's capacity.
final class WindowPrefixTests: XCTestCase {
    static let model = #"""
        {"entities": [{"name": "Item", "attributes": [
          {"name": "name", "type": "string"}, {"name": "score", "type": "integer"}, {"name": "zone", "type": "string"}]}]}
        """#

    static let windows = [
        #"{"request": {"entity": "Item", "sort": [{"key": "score", "ascending": false}, {"key": "name"}], "limit": 5, "offset": 2}, "include": "all"}"#,
        #"{"request": {"entity": "Item", "predicate": "score >= 100", "sort": [{"key": "score"}, {"key": "name"}], "limit": 10}, "include": "all"}"#,
        #"{"request": {"entity": "Item", "sort": [{"key": "zone"}, {"key": "score"}], "limit": 8}, "sectionKeyPath": "zone", "include": "all"}"#,
        #"{"request": {"entity": "Item", "properties": ["name"], "predicate": "zone == 'b'", "sort": [{"key": "name"}], "limit": 4, "offset": 1}, "include": "all", "coalesceMs": 2}"#,
    ]

    func testWindowsHoldAPrefixAndRefillFromTheStore() throws {
        for seed in 1...2 { try run(seed: UInt64(seed)) }
    }

    private func run(seed: UInt64) throws {
        let peer: [UInt8] = [1]
        let core = try CoreCaller(model: Self.model, name: "window", peers: [peer])
        let (service, outbox) = (core.service, core.outbox)
        func call(_ method: String, _ params: String) throws -> JSONValue { try core.call(peer, method, params) }
        var random = SeededGenerator(seed: seed)
        var counter = 0
        func item() -> String {
            counter += 1
            let zone = ["a", "b", "c"].randomElement(using: &random)!
            return
                #"{"entity": "Item", "tempId": "t\#(counter)", "values": {"name": "n\#(counter)", "score": \#(Int.random(in: 0..<300, using: &random)), "zone": "\#(zone)"}}"#
        }
        var live: [String] = []
        let first = try call("store/save", #"{"inserted": [\#((0..<300).map { _ in item() }.joined(separator: ","))]}"#)
        live += first["ids"]?.objectValue?.values.compactMap(\.stringValue) ?? []

        var held: [RowImagePropertyTests.Held] = []
        for params in Self.windows {
            held.append(.init(params: params, answer: try call("results/subscribe", params)))
        }
        let subscribed = try service.statistics()
        for set in subscribed.subscriptions {
            XCTAssertLessThanOrEqual(set.rows, 10 + 64, "seed \(seed): a window holds its capacity, not the table")
        }
        let start = try XCTUnwrap(try service.statistics().storeReads)
        for step in 0..<60 {
            var updated: [String] = []
            var deleted: [String] = []
            var inserted: [String] = []
            switch Int.random(in: 0..<4, using: &random) {
            case 0:
                // A run of deletes: the windows lose more than their margin now and then.
                for id in live.shuffled(using: &random).prefix(Int.random(in: 20...80, using: &random)) {
                    deleted.append(#"{"id": "\#(id)"}"#)
                    live.removeAll { $0 == id }
                }
            case 1:
                for _ in 0..<Int.random(in: 1...30, using: &random) { inserted.append(item()) }
            default:
                for id in Set(live.shuffled(using: &random).prefix(Int.random(in: 1...40, using: &random))) {
                    let zone = ["a", "b", "c"].randomElement(using: &random)!
                    updated.append(
                        #"{"id": "\#(id)", "values": {"score": \#(Int.random(in: 0..<300, using: &random)), "zone": "\#(zone)"}}"#
                    )
                }
            }
            let result = try call(
                "store/save",
                #"{"inserted": [\#(inserted.joined(separator: ","))], "updated": [\#(updated.joined(separator: ","))], "deleted": [\#(deleted.joined(separator: ","))]}"#
            )
            live += result["ids"]?.objectValue?.values.compactMap(\.stringValue) ?? []
            for index in held.indices {
                if held[index].params.contains("coalesceMs") {
                    // A snapshot announces the open window first.
                    _ = try call("results/snapshot", #"{"subscription": "\#(held[index].results.subscription)"}"#)
                }
                if let problem = held[index].results.catchUp(with: outbox.received(by: peer)) {
                    XCTFail("seed \(seed) step \(step): \(problem)")
                }
                let params = try JSONParser.parse(Array(held[index].params.utf8))
                let fresh =
                    try call("store/fetch", String(decoding: JSONWriter.encode(params["request"]!), as: UTF8.self))[
                        "objects"]?.arrayValue ?? []
                XCTAssertEqual(
                    held[index].results.objects, fresh, "seed \(seed) step \(step): \(held[index].params)")
            }
            for set in try service.statistics().subscriptions {
                XCTAssertLessThanOrEqual(set.rows, 10 + 64, "seed \(seed) step \(step): held rows")
            }
        }
        let reads = try XCTUnwrap(try service.statistics().storeReads)
        XCTAssertGreaterThan(reads.windowRefill - start.windowRefill, 0, "seed \(seed): the windows refilled")
        print(
            "windows, seed \(seed): \(reads.windowRefill - start.windowRefill) refills over \(reads.commits - start.commits) commits"
        )
    }
}
