import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// `server/stats` counts what publishing each commit read of the store, by
/// reason (issue 34), so that a change that makes the deltas read more shows.
final class StoreReadCountTests: XCTestCase {
    static let model = #"""
        {"entities": [
          {"name": "Club", "attributes": [{"name": "name", "type": "string"}],
           "relationships": [{"name": "plays", "destination": "Play", "toMany": true, "inverse": "club"}]},
          {"name": "Play", "attributes": [{"name": "name", "type": "string"}, {"name": "score", "type": "integer"}],
           "relationships": [{"name": "club", "destination": "Club", "inverse": "plays", "optional": true}]}]}
        """#

    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-reads-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws { try? FileManager.default.removeItem(at: directory) }

    /// Runs request `id` of `peer` and returns its result.
    @discardableResult
    private func call(
        _ service: DepotService, _ outbox: RecordingOutbox, _ peer: [UInt8], _ id: Int, _ method: String,
        _ params: String
    ) throws -> JSONValue {
        request(service, peer, id: id, method, params)
        let response = try outbox.response(id, of: peer)
        return try XCTUnwrap(response["result"], "\(method): \(response)")
    }

    /// The store reads publishing made during `body` (a save's answer comes after its publishing).
    private func reads(_ service: DepotService, _ body: () throws -> Void) throws -> ServerStats.StoreReads {
        let before = try XCTUnwrap(try service.statistics().storeReads)
        try body()
        service.writes.lane.drain()
        let after = try XCTUnwrap(try service.statistics().storeReads)
        return ServerStats.StoreReads(
            commits: after.commits - before.commits, snapshot: after.snapshot - before.snapshot,
            changedRows: after.changedRows - before.changedRows, relationship: after.relationship - before.relationship,
            windowRefill: after.windowRefill - before.windowRefill, include: after.include - before.include)
    }

    func testTheCountersMoveByReason() throws {
        let (service, outbox) = try makeCore(in: directory, model: Self.model)
        defer { service.stop() }
        let peer: [UInt8] = [1]
        try call(service, outbox, peer, 1, "initialize", #"{"protocolVersion": "1"}"#)
        try call(
            service, outbox, peer, 2, "store/save",
            #"{"inserted": [{"entity": "Club", "values": {"name": "A"}}]}"#)
        try call(
            service, outbox, peer, 20, "store/save",
            #"{"inserted": [{"entity": "Play", "values": {"name": "p1", "score": 1, "club": "Club/1"}}]}"#)

        // No live set: a commit costs publishing nothing.
        var counted = try reads(service) {
            try call(
                service, outbox, peer, 3, "store/save",
                #"{"inserted": [{"entity": "Play", "values": {"name": "p2", "score": 2}}]}"#)
        }
        XCTAssertEqual(counted, ServerStats.StoreReads(), "no set, no read")

        // Sets evaluated in memory (whole objects, some properties, sections, an equality filter) follow a commit from the values it carries: no snapshot, no read.
        let inMemory = [
            #"{"request": {"entity": "Play", "sort": [{"key": "score"}]}, "include": "all"}"#,
            #"{"request": {"entity": "Play", "properties": ["name"], "sort": [{"key": "name"}]}, "include": "all"}"#,
            #"{"request": {"entity": "Play", "predicate": "score == 3", "sort": [{"key": "name"}]}, "include": "all"}"#,
            #"{"request": {"entity": "Play", "sort": [{"key": "score"}, {"key": "name"}]}, "sectionKeyPath": "score", "include": "all"}"#,
        ]
        for (offset, params) in inMemory.enumerated() {
            try call(service, outbox, peer, 30 + offset, "results/subscribe", params)
        }
        counted = try reads(service) {
            try call(
                service, outbox, peer, 5, "store/save",
                #"{"inserted": [{"entity": "Play", "values": {"name": "p3", "score": 3}}]}"#)
            try call(
                service, outbox, peer, 6, "store/save", #"{"updated": [{"id": "Play/2", "values": {"name": "p2b"}}]}"#)
            try call(service, outbox, peer, 7, "store/save", #"{"deleted": [{"id": "Play/3"}]}"#)
        }
        XCTAssertEqual(counted, ServerStats.StoreReads(commits: 3), "from the commits' row images alone")
        let changes = outbox.received(by: peer).filter { $0["method"] == "results/didChange" }
        XCTAssertGreaterThanOrEqual(changes.count, 10, "every set heard of the changes: \(changes)")
        let renamed = changes.compactMap { $0["params"]?["objects"]?.arrayValue }.joined()
            .compactMap { $0["object"] }.filter { $0["name"] == "p2b" }
        XCTAssertTrue(renamed.contains { $0["version"] != nil && $0["score"] == 2 }, "whole objects from the images")
        XCTAssertTrue(renamed.contains { $0["version"] == nil && $0["score"] == nil }, "properties projected")

        // A set through a relationship reads its candidates from a snapshot, counted as relationship reads.
        try call(
            service, outbox, peer, 8, "results/subscribe",
            #"{"request": {"entity": "Play", "predicate": "club.name == 'B'", "sort": [{"key": "name"}]}, "include": "all"}"#
        )
        counted = try reads(service) {
            try call(
                service, outbox, peer, 9, "store/save", #"{"updated": [{"id": "Club/1", "values": {"name": "B"}}]}"#)
        }
        XCTAssertEqual(counted.commits, 1)
        XCTAssertEqual(counted.snapshot, 1)
        XCTAssertGreaterThanOrEqual(counted.relationship, 1, "\(counted)")
        XCTAssertEqual(counted.windowRefill, 0)
        let joined = outbox.received(by: peer).filter { $0["method"] == "results/didChange" }.last
        XCTAssertEqual(joined?["params"]?["objects"]?.arrayValue?.first?["type"], "insert", "p1 joined club B's set")
        XCTAssertEqual(joined?["params"]?["objects"]?.arrayValue?.first?["id"], "Play/1")

        // A group over the entity's own keys takes its members' values from the images: no read.
        try call(
            service, outbox, peer, 10, "results/subscribe",
            #"{"request": {"entity": "Play", "groupBy": ["score"], "aggregates": [{"name": "n", "function": "count"}]}, "include": "all"}"#
        )
        counted = try reads(service) {
            try call(
                service, outbox, peer, 11, "store/save",
                #"{"inserted": [{"entity": "Play", "values": {"name": "p4", "score": 4}}]}"#)
        }
        XCTAssertEqual(counted.commits, 1)
        XCTAssertEqual(counted.snapshot, 1)
        XCTAssertEqual(counted.changedRows, 0, "\(counted)")
        XCTAssertEqual(counted.include, 0, "the in-memory sets take the new row from the images")

        let total = try XCTUnwrap(try service.statistics().storeReads)
        XCTAssertGreaterThanOrEqual(total.commits, 3)
    }

    /// A migration changes no rows, yet sets that follow commits from their row images follow it too:
    /// its commit is published with a snapshot (the sets move to the new model from it), and the next
    /// save is evaluated under the new model from its images alone.
    func testAMigrationReachesSetsFollowedFromRowImages() throws {
        let (service, outbox) = try makeCore(in: directory, model: Self.model)
        defer { service.stop() }
        let peer: [UInt8] = [1]
        try call(service, outbox, peer, 1, "initialize", #"{"protocolVersion": "1"}"#)
        try call(
            service, outbox, peer, 2, "store/save",
            #"{"inserted": [{"entity": "Play", "values": {"name": "p1", "score": 1}}]}"#)
        try call(
            service, outbox, peer, 3, "results/subscribe",
            #"{"request": {"entity": "Play", "sort": [{"key": "score"}]}, "include": "all"}"#)
        let migrated = Self.model.replacingOccurrences(
            of: #"{"name": "score", "type": "integer"}"#,
            with: #"{"name": "score", "type": "integer"}, {"name": "rank", "type": "integer", "default": 7}"#)
        var migration: JSONValue = .null
        var counted = try reads(service) {
            migration = try call(service, outbox, peer, 4, "model/define", migrated)
        }
        let number = try XCTUnwrap(migration["transaction"]?.intValue, "a migration is a transaction")
        XCTAssertEqual(counted.snapshot, 1, "the migration's commit is published with a snapshot: \(counted)")
        var changes = outbox.received(by: peer).filter { $0["method"] == "results/didChange" }
        XCTAssertEqual(changes.last?["params"]?["transaction"]?.intValue, number, "the set followed the migration")
        let update = changes.last?["params"]?["objects"]?.arrayValue?.first
        XCTAssertEqual(update?["type"], "update")
        XCTAssertEqual(update?["object"]?["rank"], 7, "the new attribute's default")

        counted = try reads(service) {
            try call(
                service, outbox, peer, 5, "store/save",
                #"{"inserted": [{"entity": "Play", "values": {"name": "p2", "score": 2, "rank": 3}}]}"#)
        }
        XCTAssertEqual(counted, ServerStats.StoreReads(commits: 1), "from the images, under the new model")
        changes = outbox.received(by: peer).filter { $0["method"] == "results/didChange" }
        let insert = changes.last?["params"]?["objects"]?.arrayValue?.first
        XCTAssertEqual(insert?["type"], "insert")
        XCTAssertEqual(insert?["object"]?["rank"], 3)
    }

    /// `store/observe` observers take no snapshot they do not need (issue 34): one without values
    /// makes publishing read nothing (a save may commit on the spot); one with values takes them
    /// from the commit's row images; only one of an entity whose values a commit did not carry
    /// reads them, counted as `include`.
    func testObserversReadOnlyWhatTheCommitDidNotCarry() throws {
        let (service, outbox) = try makeCore(in: directory, model: Self.model)
        defer { service.stop() }
        let peer: [UInt8] = [1]
        try call(service, outbox, peer, 1, "initialize", #"{"protocolVersion": "1"}"#)
        XCTAssertFalse(service.publishingReads)
        let plain = try call(service, outbox, peer, 2, "store/observe", "{}")["observer"]?.stringValue
        XCTAssertFalse(service.publishingReads, "an observer without values reads nothing")
        var read = try reads(service) {
            try call(
                service, outbox, peer, 3, "store/save",
                #"{"inserted": [{"entity": "Play", "values": {"name": "p", "score": 1}}]}"#)
        }
        XCTAssertEqual(read, ServerStats.StoreReads())
        let valued = try call(
            service, outbox, peer, 4, "store/observe", #"{"entities": ["Play"], "includeValues": true}"#)["observer"]?
            .stringValue
        XCTAssertTrue(service.publishingReads)
        read = try reads(service) {
            try call(
                service, outbox, peer, 5, "store/save",
                #"{"updated": [{"id": "Play/1", "values": {"name": "q", "score": 3}}]}"#)
        }
        XCTAssertEqual(read, ServerStats.StoreReads(), "the values come with the commit")
        let heard = try outbox.wait(for: peer) { messages in
            messages.contains { $0["method"] == "store/didSave" && $0["params"]?["observer"]?.stringValue == valued }
        }
        let saved = heard.last { $0["params"]?["observer"]?.stringValue == valued }
        XCTAssertEqual(saved?["params"]?["objects"]?["Play/1"]?["score"], .int(3), "\(heard)")
        XCTAssertEqual(saved?["params"]?["objects"]?["Play/1"]?["name"], "q")
        XCTAssertTrue(
            heard.contains {
                $0["method"] == "store/didSave" && $0["params"]?["observer"]?.stringValue == plain
                    && $0["params"]?["objects"] == nil
                    && $0["params"]?["transaction"] == saved?["params"]?["transaction"]
            }, "\(heard)")
        // A commit too big for row images and for values in a notification (a big batch): its
        // didSave goes without them, and nothing is read for them.
        let count = max(Store.largestImagedTransaction, DeltaEncoder.largestNotification) + 1
        let objects = (0..<count).map { #"{"name": "b\#($0)", "score": 0}"# }.joined(separator: ",")
        var inserted: JSONValue?
        read = try reads(service) {
            inserted = try call(
                service, outbox, peer, 6, "store/batchInsert", #"{"entity": "Play", "objects": [\#(objects)]}"#)[
                    "transaction"]
        }
        XCTAssertEqual(read, ServerStats.StoreReads())
        let batch = outbox.received(by: peer).first {
            $0["params"]?["observer"]?.stringValue == valued && $0["params"]?["transaction"] == inserted
        }
        XCTAssertNotNil(batch, "the observer heard of the batch")
        XCTAssertNil(batch?["params"]?["objects"], "\(batch ?? .null)")
        try call(service, outbox, peer, 7, "store/unobserve", #"{"observer": "\#(valued ?? "")"}"#)
        XCTAssertFalse(service.publishingReads, "the observer with values is gone")
    }
}
