import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// The service core driven in memory: messages in through
/// ``DepotService/receive(_:from:keyID:)``, everything it sends recorded by an
/// outbox. No socket, no process.
final class ServiceCoreTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-core-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    static let model = #"""
        {"entities": [{"name": "Item", "uniquenessConstraints": [["name"]], "attributes": [
          {"name": "name", "type": "string"}, {"name": "score", "type": "integer"}]}]}
        """#

    /// A core over a new store in the temporary directory, with ``model`` defined.
    private func makeService(
        configure: (inout ServerConfiguration) -> Void = { _ in }
    ) throws -> (DepotService, RecordingOutbox) {
        try makeCore(in: directory, model: Self.model, configure: configure)
    }

    /// Opens a session for `peer`, subscribes it to `subscription` (include all) and makes it observe saves.
    private func join(
        _ service: DepotService, _ outbox: RecordingOutbox, _ peer: [UInt8], subscription: String
    ) throws -> [JSONValue] {
        request(
            service, peer, id: 1, "initialize",
            #"{"protocolVersion": "1", "clientInfo": {"name": "p\#(peer)", "version": "1"}}"#)
        let initialized = try outbox.response(1, of: peer)
        XCTAssertNotNil(initialized["result"]?["sessionId"], "\(initialized)")
        request(service, peer, id: 2, "results/subscribe", #"{"request": \#(subscription), "include": "all"}"#)
        let subscribed = try outbox.response(2, of: peer)
        request(service, peer, id: 3, "store/observe", "{}")
        XCTAssertNotNil(try outbox.response(3, of: peer)["result"]?["observer"])
        return subscribed["result"]?["objects"]?.arrayValue ?? []
    }

    private static func position(in messages: [JSONValue], where test: (JSONValue) -> Bool) -> Int? {
        messages.firstIndex(where: test)
    }

    func testASaveIsAnsweredAfterItsNotificationsWhichEveryPeerGets() throws {
        let (service, outbox) = try makeService()
        defer { service.stop() }
        let byName = #"{"entity": "Item", "sort": [{"key": "name"}]}"#
        let alice: [UInt8] = [1]
        let bob: [UInt8] = [2]
        XCTAssertEqual(try join(service, outbox, alice, subscription: byName), [])
        XCTAssertEqual(try join(service, outbox, bob, subscription: byName), [])

        request(
            service, bob, id: 4, "store/save",
            #"{"inserted": [{"entity": "Item", "values": {"name": "a", "score": 1}}]}"#)
        let response = try outbox.response(4, of: bob)
        XCTAssertEqual(response["result"]?["transaction"], 1)
        let messages = outbox.received(by: bob)
        let answered = try XCTUnwrap(Self.position(in: messages) { $0["id"] == 4 })
        let didSave = try XCTUnwrap(Self.position(in: messages) { $0["method"] == "store/didSave" })
        let didChange = try XCTUnwrap(Self.position(in: messages) { $0["method"] == "results/didChange" })
        XCTAssertLessThan(didSave, answered, "store/didSave precedes the committing response")
        XCTAssertLessThan(didChange, answered, "results/didChange precedes the committing response")
        XCTAssertEqual(messages[didChange]["params"]?["seq"], 1)
        let insert = messages[didChange]["params"]?["objects"]?.arrayValue?.first
        XCTAssertEqual(insert?["type"], "insert")
        XCTAssertEqual(insert?["newIndexPath"], [0, 0])

        // The other peer gets the same transaction's notifications, and no response.
        let other = try outbox.wait(for: alice) { $0.contains { $0["method"] == "results/didChange" } }
        XCTAssertTrue(other.contains { $0["method"] == "store/didSave" && $0["params"]?["transaction"] == 1 })
        XCTAssertFalse(other.contains { $0["id"] == 4 })
    }

    /// Several peers fire saves without waiting (so that they queue and commit
    /// in groups), some of which fail (a duplicate name, an object that does
    /// not exist). Every peer must see: the committed transactions' `store/didSave`
    /// in order without holes; each successful response after the notifications
    /// of its transaction; its subscription's `seq` without gaps; and the deltas,
    /// applied to the first results, equal to a fresh fetch.
    func testInterleavedSavesFromSeveralPeersKeepEachPeersOrder() throws {
        let (service, outbox) = try makeService()
        defer { service.stop() }
        let subscription =
            #"{"entity": "Item", "predicate": "score >= 20", "sort": [{"key": "score"}, {"key": "name"}]}"#
        let peers: [[UInt8]] = (1...4).map { [UInt8($0)] }
        var initial: [[UInt8]: [JSONValue]] = [:]
        for peer in peers { initial[peer] = try join(service, outbox, peer, subscription: subscription) }

        let savesPerPeer = 60
        DispatchQueue.concurrentPerform(iterations: peers.count) { index in
            var generator = SeededGenerator(seed: UInt64(index + 1))
            for number in 0..<savesPerPeer {
                let id = 100 + number
                let target = Int.random(in: 1...40, using: &generator)
                let params: String
                switch Int.random(in: 0..<10, using: &generator) {
                case 0..<4:
                    // Names repeat across peers: some inserts break the uniqueness constraint.
                    let name = "n\(Int.random(in: 0..<50, using: &generator))"
                    let score = Int.random(in: 0..<40, using: &generator)
                    params = #"{"inserted": [{"entity": "Item", "values": {"name": "\#(name)", "score": \#(score)}}]}"#
                case 4..<8:
                    let score = Int.random(in: 0..<40, using: &generator)
                    params = #"{"updated": [{"id": "Item/\#(target)", "values": {"score": \#(score)}}]}"#
                default:
                    params = #"{"deleted": [{"id": "Item/\#(target)"}]}"#
                }
                request(service, peers[index], id: id, "store/save", params)
            }
        }

        var committed = Set<Int64>()
        var failures = 0
        for peer in peers {
            let messages = try outbox.wait(for: peer) { messages in
                (100..<100 + savesPerPeer).allSatisfy { id in messages.contains { $0["id"] == .int(Int64(id)) } }
            }
            for message in messages where message["id"]?.intValue ?? 0 >= 100 {
                if let transaction = message["result"]?["transaction"]?.intValue, transaction > 0 {
                    committed.insert(transaction)
                } else if message["error"] != nil {
                    failures += 1
                }
            }
        }
        XCTAssertGreaterThan(failures, 0, "some saves were meant to fail")
        XCTAssertGreaterThan(committed.count, 20)
        XCTAssertEqual(committed, Set(1...Int64(committed.count)), "transactions are numbered without holes")
        let finalTransaction = Int64(committed.count)

        let fresh =
            try service.store.fetch(
                FetchRequest(
                    entity: "Item", predicate: "score >= 20",
                    sort: [SortDescriptor(key: "score"), SortDescriptor(key: "name")]),
                scope: .unrestricted
            ).objects ?? []
        for peer in peers {
            let messages = try outbox.wait(for: peer) { messages in
                messages.contains {
                    $0["method"] == "store/didSave" && $0["params"]?["transaction"] == .int(finalTransaction)
                }
            }
            let saved = messages.filter { $0["method"] == "store/didSave" }.compactMap {
                $0["params"]?["transaction"]?.intValue
            }
            XCTAssertEqual(saved, Array(1...finalTransaction), "peer \(peer): every transaction once, in order")
            var seen = Set<Int64>()
            for message in messages {
                if message["method"] == "store/didSave", let transaction = message["params"]?["transaction"]?.intValue {
                    seen.insert(transaction)
                }
                if let transaction = message["result"]?["transaction"]?.intValue, transaction > 0,
                    message["id"]?.intValue ?? 0 >= 100
                {
                    XCTAssertTrue(
                        seen.isSuperset(of: 1...transaction),
                        "peer \(peer): the response of transaction \(transaction) came before its notifications")
                }
            }
            let changes = messages.filter { $0["method"] == "results/didChange" }.compactMap(\.["params"])
            XCTAssertEqual(changes.compactMap { $0["seq"]?.intValue }, Array(1...Int64(changes.count)))
            var held = HeldResults(objects: initial[peer] ?? [])
            for change in changes {
                if let problem = held.apply(change) { XCTFail("peer \(peer): \(problem)") }
            }
            XCTAssertEqual(
                held.objects, fresh, "peer \(peer): the deltas applied to the first results give a fresh fetch")
        }
    }

    /// Publishing runs in the lane, off the writer: while the lane is held,
    /// saves still commit (the writer does not wait for their deltas), and
    /// nothing is answered; once it is released every peer gets each
    /// transaction's notifications before its response, in commit order.
    func testTheWriterCommitsWhileThePublishLaneIsBusy() throws {
        let (service, outbox) = try makeService()
        defer { service.stop() }
        let byName = #"{"entity": "Item", "sort": [{"key": "name"}]}"#
        let alice: [UInt8] = [1]
        XCTAssertEqual(try join(service, outbox, alice, subscription: byName), [])
        let before = outbox.received(by: alice).count

        let gate = DispatchSemaphore(value: 0)
        // A job holding the lane (on a reader, as publishing jobs run).
        service.writes.async { service.writes.lane.enqueueReading { _ in gate.wait() } }
        for index in 0..<3 {
            request(
                service, alice, id: 10 + index, "store/save",
                #"{"inserted": [{"entity": "Item", "values": {"name": "n\#(index)", "score": \#(index)}}]}"#)
        }
        // All three commit although none of their deltas could be computed yet.
        let deadline = Date().addingTimeInterval(10)
        while try service.store.latestTransaction() < 3 && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        XCTAssertEqual(try service.store.latestTransaction(), 3, "the writer waited for publishing")
        XCTAssertFalse(service.writes.lane.isIdle)
        XCTAssertEqual(outbox.received(by: alice).count, before, "nothing goes out before its turn in the lane")

        gate.signal()
        let messages = try outbox.wait(for: alice) { $0.contains { $0["id"] == 12 } }.dropFirst(before)
        // Saves that queued together may commit as one group: then every notification precedes every response.
        let kinds = messages.map { $0["method"]?.stringValue ?? "response \($0["id"]?.intValue ?? -1)" }
        XCTAssertEqual(kinds.filter { $0.hasPrefix("response") }, ["response 10", "response 11", "response 12"])
        for (transaction, id) in [(1, 10), (2, 11), (3, 12)] {
            let answered = try XCTUnwrap(messages.firstIndex { $0["id"] == .int(Int64(id)) })
            let saved = try XCTUnwrap(
                messages.firstIndex {
                    $0["method"] == "store/didSave" && $0["params"]?["transaction"] == .int(Int64(transaction))
                })
            let changed = try XCTUnwrap(
                messages.firstIndex {
                    $0["method"] == "results/didChange" && $0["params"]?["transaction"] == .int(Int64(transaction))
                })
            XCTAssertLessThan(saved, answered, "\(kinds)")
            XCTAssertLessThan(changed, answered, "\(kinds)")
        }
        XCTAssertEqual(messages.compactMap { $0["params"]?["seq"]?.intValue }, [1, 2, 3])
        XCTAssertEqual(
            messages.compactMap { $0["method"] == "store/didSave" ? $0["params"]?["transaction"]?.intValue : nil },
            [1, 2, 3])
    }

    /// A JSON-RPC batch that writes cannot carry requests whose answers are
    /// ordered with deltas: each gets -32600 naming its method; the rest runs.
    func testABatchThatWritesRefusesResultsReads() throws {
        let (service, outbox) = try makeService()
        defer { service.stop() }
        let alice: [UInt8] = [1]
        XCTAssertEqual(
            try join(service, outbox, alice, subscription: #"{"entity": "Item", "sort": [{"key": "name"}]}"#), [])
        let batch = #"""
            [{"jsonrpc": "2.0", "id": 20, "method": "store/save",
              "params": {"inserted": [{"entity": "Item", "values": {"name": "b", "score": 2}}]}},
             {"jsonrpc": "2.0", "id": 21, "method": "results/subscribe",
              "params": {"request": {"entity": "Item", "sort": [{"key": "score"}]}}},
             {"jsonrpc": "2.0", "id": 22, "method": "results/snapshot", "params": {"subscription": "s1"}}]
            """#
        service.receive(Array(batch.utf8), from: alice)
        let answers = try XCTUnwrap(
            outbox.wait(for: alice) { $0.contains { $0.arrayValue != nil } }.last { $0.arrayValue != nil }?.arrayValue)
        XCTAssertEqual(answers.count, 3)
        XCTAssertEqual(answers[0]["result"]?["transaction"], 1)
        for (answer, method) in zip(answers.dropFirst(), ["results/subscribe", "results/snapshot"]) {
            XCTAssertEqual(answer["error"]?["code"], -32600, "\(answer)")
            XCTAssertEqual(answer["error"]?["data"]?["method"], .string(method))
        }
        // The refused subscribe holds nothing: the session holds one subscription.
        XCTAssertEqual(service.results.subscriptionCount(of: alice), 1)
    }

    /// `store/observe` and `store/unobserve` may sit in a JSON-RPC batch that writes (their answers
    /// come from the publish lane, the registration queued from the writer at its place among the
    /// batch's writes): the observer hears the batch's saves after it, not those after its removal.
    func testABatchThatWritesMayObserveAndUnobserve() throws {
        let (service, outbox) = try makeService()
        defer { service.stop() }
        let alice: [UInt8] = [1]
        request(service, alice, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        _ = try outbox.response(1, of: alice)
        let batch = #"""
            [{"jsonrpc": "2.0", "id": 20, "method": "store/observe", "params": {"includeValues": true}},
             {"jsonrpc": "2.0", "id": 21, "method": "store/save",
              "params": {"inserted": [{"entity": "Item", "values": {"name": "b", "score": 2}}]}},
             {"jsonrpc": "2.0", "id": 22, "method": "store/unobserve", "params": {"observer": "o1"}},
             {"jsonrpc": "2.0", "id": 23, "method": "store/save",
              "params": {"inserted": [{"entity": "Item", "values": {"name": "c", "score": 3}}]}}]
            """#
        service.receive(Array(batch.utf8), from: alice)
        let messages = try outbox.wait(for: alice) { $0.contains { $0.arrayValue != nil } }
        let answers = try XCTUnwrap(messages.last { $0.arrayValue != nil }?.arrayValue)
        XCTAssertEqual(answers.count, 4, "\(answers)")
        XCTAssertEqual(answers[0]["result"]?["observer"], "o1", "\(answers)")
        XCTAssertEqual(answers[2]["result"], .null, "\(answers)")
        // The batch's commits are published once it ends: the observer, gone by then, hears neither.
        service.writes.lane.drain()
        let saves = outbox.received(by: alice).filter { $0["method"] == "store/didSave" }
        XCTAssertEqual(saves, [], "\(saves)")
        // A new observer in a batch that then writes hears that write, with its values.
        let second = #"""
            [{"jsonrpc": "2.0", "id": 30, "method": "store/observe", "params": {"includeValues": true}},
             {"jsonrpc": "2.0", "id": 31, "method": "store/save",
              "params": {"inserted": [{"entity": "Item", "values": {"name": "d", "score": 4}}]}}]
            """#
        service.receive(Array(second.utf8), from: alice)
        let heard = try outbox.wait(for: alice) { $0.contains { $0["method"] == "store/didSave" } }
        let didSave = try XCTUnwrap(heard.first { $0["method"] == "store/didSave" })
        XCTAssertEqual(didSave["params"]?["observer"], "o2")
        XCTAssertEqual(didSave["params"]?["objects"]?["Item/3"]?["name"], "d", "\(didSave)")
    }

    /// Subscriptions the engine drops (the store can no longer follow its commits, so the sets
    /// could not be rebuilt) give their places in the session's quota back: the resync that
    /// `results/didInvalidate` asks for is not refused with -32017.
    func testDroppedSubscriptionsGiveBackTheirQuota() throws {
        let (service, outbox) = try makeService { $0.maxSubscriptionsPerSession = 2 }
        defer { service.stop() }
        let alice: [UInt8] = [1]
        request(service, alice, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        _ = try outbox.response(1, of: alice)
        let requests = [
            #"{"entity": "Item", "sort": [{"key": "name"}]}"#, #"{"entity": "Item", "sort": [{"key": "score"}]}"#,
        ]
        for (offset, subscription) in requests.enumerated() {
            request(service, alice, id: 10 + offset, "results/subscribe", #"{"request": \#(subscription)}"#)
            XCTAssertNotNil(try outbox.response(10 + offset, of: alice)["result"])
        }
        request(service, alice, id: 12, "results/subscribe", #"{"request": \#(requests[0])}"#)
        XCTAssertEqual(try outbox.response(12, of: alice)["error"]?["code"], -32017, "the quota holds")

        service.results.invalidateAll(reason: "error", context: service)
        let invalidated = try outbox.wait(for: alice) {
            $0.filter { $0["method"] == "results/didInvalidate" }.count == 2
        }.filter { $0["method"] == "results/didInvalidate" }
        XCTAssertEqual(invalidated.compactMap { $0["params"]?["subscription"]?.stringValue }.sorted(), ["s1", "s2"])
        XCTAssertEqual(service.results.counts.subscriptions, 0)

        for (offset, subscription) in requests.enumerated() {
            request(service, alice, id: 20 + offset, "results/subscribe", #"{"request": \#(subscription)}"#)
            let answer = try outbox.response(20 + offset, of: alice)
            XCTAssertNotNil(answer["result"], "the resync was refused: \(answer)")
        }
    }

    /// No silent desync: when the engine fails to follow a transaction (the failure injected
    /// through the in-memory core), the subscriber hears `results/didInvalidate {reason: "error"}`,
    /// and a resync finds results equal to a fresh fetch, with deltas that go on from there.
    func testAFailureToFollowATransactionInvalidatesAndTheResyncIsExact() throws {
        let (service, outbox) = try makeService()
        defer { service.stop() }
        let alice: [UInt8] = [1]
        let byScore = #"{"entity": "Item", "sort": [{"key": "score"}, {"key": "name"}]}"#
        _ = try join(service, outbox, alice, subscription: byScore)
        request(
            service, alice, id: 10, "store/save",
            #"{"inserted": [{"entity": "Item", "values": {"name": "a", "score": 1}}, {"entity": "Item", "values": {"name": "b", "score": 2}}, {"entity": "Item", "values": {"name": "c", "score": 3}}]}"#
        )
        XCTAssertEqual(try outbox.response(10, of: alice)["result"]?["transaction"], 1)
        service.results.failToFollow(2)
        request(
            service, alice, id: 11, "store/save", #"{"updated": [{"id": "Item/1", "values": {"score": 9}}]}"#)
        XCTAssertEqual(try outbox.response(11, of: alice)["result"]?["transaction"], 2, "the save itself commits")
        let invalidation = try XCTUnwrap(
            outbox.received(by: alice).last { $0["method"] == "results/didInvalidate" }, "told before the answer")
        XCTAssertEqual(invalidation["params"]?["subscription"], "s1")
        XCTAssertEqual(invalidation["params"]?["reason"], "error")

        request(service, alice, id: 12, "results/snapshot", #"{"subscription": "s1"}"#)
        let snapshot = try XCTUnwrap(try outbox.response(12, of: alice)["result"])
        request(
            service, alice, id: 13, "store/fetch",
            #"{"entity": "Item", "sort": [{"key": "score"}, {"key": "name"}], "resultType": "ids"}"#)
        let fresh = try XCTUnwrap(try outbox.response(13, of: alice)["result"])
        XCTAssertEqual(snapshot["ids"], fresh["ids"])
        XCTAssertEqual(snapshot["ids"], ["Item/2", "Item/3", "Item/1"])
        XCTAssertEqual(snapshot["transaction"], 2)

        request(
            service, alice, id: 14, "store/save", #"{"updated": [{"id": "Item/1", "values": {"score": 0}}]}"#)
        _ = try outbox.response(14, of: alice)
        let change = try XCTUnwrap(
            outbox.received(by: alice).last { $0["method"] == "results/didChange" }?["params"])
        XCTAssertEqual(change["seq"]?.intValue, (snapshot["seq"]?.intValue ?? -1) + 1)
        XCTAssertEqual(change["transaction"], 3)
    }
}
