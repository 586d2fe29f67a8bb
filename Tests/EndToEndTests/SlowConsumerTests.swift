import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// A subscriber that stops reading overflows its own queue only: its deltas
/// stop, it later gets `results/didInvalidate {reason: overflow}` and resyncs,
/// while other sessions keep every delta.
final class SlowConsumerTests: XCTestCase {
    func testOverflowInvalidatesOnlyTheSlowSubscription() async throws {
        let daemon = try Daemon(arguments: ["--send-high-water-mark", "20", "--session-queue-limit", "50"])
        let writer = try await daemon.connect(name: "writer")
        let ids = try await writer.loadWorldCup()
        let request = FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")])

        // The slow consumer: a raw socket that subscribes, then stops reading.
        let slow = try RawClient(endpoint: daemon.endpoint)
        try slow.socket.setReceiveHighWaterMark(5)
        try slow.initialize()
        let subscribed = try slow.call(
            "results/subscribe", #"{"request":{"entity":"Team","sort":[{"key":"teamName"}]},"include":"none"}"#)
        let slowSubscription = try XCTUnwrap(subscribed["result"]?["subscription"]?.stringValue)

        let fast = try await daemon.connect(name: "fast")
        let collector = ChangeCollector(fast)
        let result = try await fast.call(ResultsSubscribe.self, .init(request: request, include: .all))
        var mirror = ResultsMirror(result, request: request, sectionKeyPath: nil)

        let padding = String(repeating: "x", count: 16_000)
        let saves = 600
        for round in 0..<saves {
            _ = try await writer.call(
                StoreSave.self,
                .init(updated: [
                    UpdatedObject(id: ids["Mexico"]!, values: ["imageName": .string("\(round)-\(padding)")])
                ]))
            mirror.apply(try await collector.expect(for: mirror.subscription))
        }
        XCTAssertEqual(mirror.seq, Int64(saves), "the fast subscriber got every delta")
        try await mirror.assertMatchesFreshFetch(fast)

        // Now the slow one reads: some deltas, then an invalidation, then nothing owed.
        try slow.socket.setReceiveTimeout(milliseconds: 5000)
        var received = 0
        var invalidated = false
        while let message = try slow.socket.receive(), let json = try? JSONParser.parse(message.last ?? []) {
            if json["method"] == "results/didInvalidate" {
                XCTAssertEqual(json["params"]?["subscription"]?.stringValue, slowSubscription)
                XCTAssertEqual(json["params"]?["reason"], "overflow")
                invalidated = true
                break
            }
            if json["method"] == "results/didChange" { received += 1 }
        }
        XCTAssertTrue(invalidated, "the slow subscriber is told to resync")
        XCTAssertLessThan(received, saves, "deltas stopped once its queue overflowed")
        let snapshot = try slow.call("results/snapshot", #"{"subscription":"\#(slowSubscription)"}"#)
        XCTAssertEqual(snapshot["result"]?["seq"]?.intValue, Int64(saves))
        XCTAssertEqual(snapshot["result"]?["ids"]?.arrayValue?.count, 32)
    }
}
