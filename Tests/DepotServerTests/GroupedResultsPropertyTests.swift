import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// The grouped delta oracle (DESIGN.md §7, Live grouped results), in memory:
/// random transactions (saves inserting, updating and deleting, batch
/// inserts, updates and deletes, objects moving between groups, groups
/// appearing, vanishing and crossing `having`, a related object renamed under
/// a to-one groupBy key) against several grouped subscriptions in several
/// sessions. After every transaction, each subscription's groups (its first
/// results with every `results/didChange` applied) equal a fresh grouped
/// fetch: the dictionaries (doubles within 1e-9 relative), the group ids and
/// the sections.
final class GroupedResultsPropertyTests: XCTestCase {
    static let model = #"""
        {"entities": [
          {"name": "Club", "attributes": [{"name": "name", "type": "string"}, {"name": "region", "type": "string", "optional": true}],
           "relationships": [{"name": "plays", "destination": "Play", "toMany": true, "inverse": "club"}]},
          {"name": "Play", "attributes": [
            {"name": "zone", "type": "string", "optional": true}, {"name": "wins", "type": "integer", "optional": true},
            {"name": "score", "type": "double", "optional": true}, {"name": "day", "type": "date", "optional": true}],
           "relationships": [{"name": "club", "destination": "Club", "inverse": "plays", "optional": true}]}]}
        """#

    /// The grouped subscriptions: sorted by key and sectioned; by an aggregate in a
    /// window (a live top three) over a to-one key path; with `having`; one
    /// group over everything; and the first one again, coalescing.
    static let subscriptions: [(params: String, groupBy: [String], coalescing: Bool)] = [
        (
            #"{"request": {"entity": "Play", "groupBy": ["zone"], "aggregates": [{"name": "n", "function": "count"}, {"name": "wins", "function": "sum", "key": "wins"}, {"name": "mean", "function": "avg", "key": "score"}, {"name": "first", "function": "min", "key": "day"}, {"name": "best", "function": "max", "key": "wins"}], "sort": [{"key": "zone"}]}, "sectionKeyPath": "zone", "include": "all"}"#,
            ["zone"], false
        ),
        (
            #"{"request": {"entity": "Play", "groupBy": ["zone", "club.region"], "aggregates": [{"name": "n", "function": "count"}, {"name": "total", "function": "sum", "key": "score"}], "sort": [{"key": "n", "ascending": false}], "limit": 3}, "include": "all"}"#,
            ["zone", "club.region"], false
        ),
        (
            #"{"request": {"entity": "Play", "predicate": "score != nil", "groupBy": ["wins"], "aggregates": [{"name": "n", "function": "count"}, {"name": "top", "function": "max", "key": "score"}, {"name": "low", "function": "min", "key": "zone"}], "having": "n >= 2", "sort": [{"key": "wins", "ascending": false}]}, "include": "all"}"#,
            ["wins"], false
        ),
        (
            #"{"request": {"entity": "Play", "aggregates": [{"name": "n", "function": "count"}, {"name": "days", "function": "count", "key": "day"}, {"name": "wins", "function": "sum", "key": "wins"}, {"name": "mean", "function": "avg", "key": "wins"}]}, "include": "all"}"#,
            [], false
        ),
        (
            #"{"request": {"entity": "Play", "groupBy": ["zone"], "aggregates": [{"name": "n", "function": "count"}, {"name": "wins", "function": "sum", "key": "wins"}, {"name": "mean", "function": "avg", "key": "score"}, {"name": "first", "function": "min", "key": "day"}, {"name": "best", "function": "max", "key": "wins"}], "sort": [{"key": "zone"}]}, "sectionKeyPath": "zone", "include": "all", "coalesceMs": 40}"#,
            ["zone"], true
        ),
    ]

    /// Which subscriptions each session holds (the first is held by two sessions: one shared set).
    static let sessions: [[UInt8]: [Int]] = [[1]: [0, 1], [2]: [0, 2, 3], [3]: [1, 2, 4]]

    func testGroupedDeltasReproduceAFreshGroupedFetchAfterEveryTransaction() throws {
        var kinds: [String: Int] = [:]
        for seed in 1...5 { try run(seed: UInt64(seed), kinds: &kinds) }
        // The random transactions made every kind of change, sections included.
        for kind in ["insert", "delete", "move", "update", "section insert", "section delete", "transactions"] {
            XCTAssertGreaterThan(kinds[kind] ?? 0, 0, "no \(kind) in \(kinds)")
        }
    }

    /// A one-row change between two groups of a 400-group subscription changes
    /// exactly those two groups; `results/snapshot` and `results/objects` read the groups.
    func testAOneRowMoveChangesExactlyItsTwoGroups() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-grouped-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (service, outbox) = try makeCore(in: directory, model: ServiceCoreTests.model)
        defer { service.stop() }
        let peer: [UInt8] = [1]
        request(service, peer, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        let items = (0..<800).map {
            #"{"entity": "Item", "tempId": "i\#($0)", "values": {"name": "i\#($0)", "score": \#($0 % 400)}}"#
        }
        request(service, peer, id: 2, "store/save", #"{"inserted": [\#(items.joined(separator: ","))]}"#)
        let moved = try XCTUnwrap(try outbox.response(2, of: peer)["result"]?["ids"]?["i5"]?.stringValue)
        request(
            service, peer, id: 3, "results/subscribe",
            #"{"request": {"entity": "Item", "groupBy": ["score"], "aggregates": [{"name": "n", "function": "count"}, {"name": "names", "function": "max", "key": "name"}], "sort": [{"key": "score"}]}}"#
        )
        let subscribed = try outbox.response(3, of: peer)["result"]
        XCTAssertEqual(subscribed?["count"], 400)
        XCTAssertEqual(
            subscribed?["objects"]?.arrayValue?.first, ["id": "group:[0]", "score": 0, "n": 2, "names": "i400"])
        let subscription = try XCTUnwrap(subscribed?["subscription"]?.stringValue)

        request(service, peer, id: 4, "store/save", #"{"updated": [{"id": "\#(moved)", "values": {"score": 7}}]}"#)
        _ = try outbox.response(4, of: peer)
        let changes = outbox.received(by: peer).filter { $0["method"] == "results/didChange" }
        XCTAssertEqual(changes.count, 1)
        let objects = changes.first?["params"]?["objects"]?.arrayValue ?? []
        XCTAssertEqual(objects.count, 2, "\(objects)")
        let byID = Dictionary(uniqueKeysWithValues: objects.map { ($0["id"]?.stringValue ?? "", $0) })
        XCTAssertEqual(Set(byID.keys), ["group:[5]", "group:[7]"])
        XCTAssertEqual(byID["group:[5]"]?["type"], "update")
        XCTAssertEqual(byID["group:[5]"]?["indexPath"], [0, 5])
        XCTAssertEqual(byID["group:[5]"]?["object"], ["id": "group:[5]", "score": 5, "n": 1, "names": "i405"])
        XCTAssertEqual(byID["group:[7]"]?["object"], ["id": "group:[7]", "score": 7, "n": 3, "names": "i7"])

        request(service, peer, id: 5, "results/snapshot", #"{"subscription": "\#(subscription)"}"#)
        let snapshot = try outbox.response(5, of: peer)["result"]
        XCTAssertEqual(snapshot?["seq"], 1)
        XCTAssertEqual(snapshot?["ids"]?.arrayValue?.count, 400)
        XCTAssertEqual(snapshot?["ids"]?.arrayValue?.last, "group:[399]")
        request(
            service, peer, id: 6, "results/objects",
            #"{"subscription": "\#(subscription)", "offset": 398, "length": 5}"#)
        XCTAssertEqual(
            try outbox.response(6, of: peer)["result"]?["objects"],
            [
                ["id": "group:[398]", "score": 398, "n": 2, "names": "i798"],
                ["id": "group:[399]", "score": 399, "n": 2, "names": "i799"],
            ])
    }

    /// What a grouped set keeps per matching row (docs/fetched-results.md states it).
    func testAMemberOfAOneKeyRequestIsFortyBytes() {
        XCTAssertEqual(MemoryLayout<GroupedResults.Member>.stride, 40)
    }

    /// A grouped subscribe that cannot be kept is refused naming the field.
    func testBadGroupedSubscriptionsNameTheField() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-grouped-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (service, outbox) = try makeCore(in: directory, model: ServiceCoreTests.model)
        defer { service.stop() }
        let peer: [UInt8] = [1]
        request(service, peer, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        let grouped = #""entity": "Item", "groupBy": ["name"], "aggregates": [{"name": "n", "function": "count"}]"#
        let cases: [(params: String, field: String)] = [
            (#"{"request": {\#(grouped), "sort": [{"key": "n"}]}, "sectionKeyPath": "n"}"#, "params.sectionKeyPath"),
            (#"{"request": {\#(grouped)}, "sectionKeyPath": "name"}"#, "params.sectionKeyPath"),
            (#"{"request": {\#(grouped)}, "cacheName": "groups"}"#, "params.cacheName"),
            (#"{"request": {\#(grouped), "resultType": "count"}}"#, "params.request.resultType"),
            (#"{"request": {\#(grouped), "sort": [{"key": "score"}]}}"#, "params.request.sort[0].key"),
            (#"{"request": {"entity": "Item", "groupBy": ["nope"]}}"#, "params.request.groupBy[0]"),
            (#"{"request": {\#(grouped), "limit": -1}}"#, "params.request.limit"),
            // Each row carries its id under `id`: no aggregate may take that name.
            (
                #"{"request": {"entity": "Item", "groupBy": ["name"], "aggregates": [{"name": "id", "function": "count"}]}}"#,
                "params.request.aggregates[0].name"
            ),
        ]
        for (index, (params, field)) in cases.enumerated() {
            request(service, peer, id: 10 + index, "results/subscribe", params)
            let error = try outbox.response(10 + index, of: peer)["error"]
            XCTAssertEqual(error?["code"], -32602, params)
            XCTAssertEqual(error?["data"]?["field"]?.stringValue, field, params)
        }
    }

    private func run(seed: UInt64, kinds: inout [String: Int]) throws {
        let core = try CoreCaller(model: Self.model, name: "grouped", label: "seed \(seed)")
        let outbox = core.outbox
        var random = SeededGenerator(seed: seed)
        let writer: [UInt8] = [8]
        func call(_ peer: [UInt8], _ method: String, _ params: String) throws -> JSONValue {
            try core.call(peer, method, params)
        }
        _ = try call(writer, "initialize", #"{"protocolVersion": "1"}"#)
        let clubs = try call(
            writer, "store/save",
            #"{"inserted": [{"entity": "Club", "tempId": "a", "values": {"name": "a", "region": "North"}}, {"entity": "Club", "tempId": "b", "values": {"name": "b", "region": "South"}}, {"entity": "Club", "tempId": "c", "values": {"name": "c"}}]}"#
        )
        let clubIDs = ["a", "b", "c"].compactMap { clubs["ids"]?[$0]?.stringValue }
        var live: [String] = []
        func values() -> String {
            func pick<T>(_ choices: [T]) -> T { choices.randomElement(using: &random)! }
            let zone = pick([#""A""#, #""B""#, #""C""#, #""D""#, "null"])
            let wins = pick(["0", "1", "2", "3", "5", "8", "null"])
            let score = pick(["0.25", "1.5", "-2", "3.75", "10", "null"])
            let day = pick([#""2024-01-02T00:00:00Z""#, #""2023-06-30T12:00:00Z""#, #""2025-03-01T00:00:00Z""#, "null"])
            let club = pick(clubIDs.map { "\"\($0)\"" } + ["null"])
            return #"{"zone": \#(zone), "wins": \#(wins), "score": \#(score), "day": \#(day), "club": \#(club)}"#
        }
        func inserted(_ result: JSONValue) {
            live += result["ids"]?.objectValue?.values.compactMap(\.stringValue) ?? []
        }
        let first = (0..<12).map { #"{"entity": "Play", "tempId": "p\#($0)", "values": \#(values())}"# }
        inserted(try call(writer, "store/save", #"{"inserted": [\#(first.joined(separator: ","))]}"#))

        /// Applies each session's new notifications and compares with a fresh grouped fetch.
        func check(_ held: inout [[UInt8]: [HeldResults]], seed: UInt64, step: Int, final: Bool) throws {
            for (peer, choices) in Self.sessions {
                for (slot, choice) in choices.enumerated() {
                    if Self.subscriptions[choice].coalescing {
                        guard final else { continue }
                        // A snapshot announces an open window first.
                        _ = try call(
                            peer, "results/snapshot", #"{"subscription": "\#(held[peer]![slot].subscription)"}"#)
                    }
                    var state = held[peer]![slot]
                    let problem = state.catchUp(with: outbox.received(by: peer)) { change in
                        let objects = change["objects"]?.arrayValue ?? []
                        for object in objects { kinds[object["type"]?.stringValue ?? "", default: 0] += 1 }
                        // A group that vanished and came back within one coalescing window keeps its row.
                        let ids = { (type: String) in Set(objects.filter { $0["type"] == .string(type) }.map(\.["id"]))
                        }
                        XCTAssertTrue(
                            ids("delete").isDisjoint(with: ids("insert")),
                            "seed \(seed) step \(step): one notification deletes and inserts one id: \(objects)")
                        for section in change["sections"]?.arrayValue ?? [] {
                            kinds["section " + (section["type"]?.stringValue ?? ""), default: 0] += 1
                        }
                        if change["transactions"] != nil { kinds["transactions", default: 0] += 1 }
                    }
                    if let problem { XCTFail("seed \(seed) step \(step): \(problem)") }
                    let fresh = try freshGroups(choice)
                    let groups = state.sections.flatMap { $0 }
                    // Every row carries its id (DESIGN.md §7), the one the deltas name; the fetch's have none.
                    for group in groups {
                        XCTAssertEqual(
                            group.object["id"]?.stringValue, group.id, "seed \(seed) step \(step): a row's id")
                    }
                    let dictionaries = groups.map { group -> JSONValue in
                        var object = group.object.objectValue ?? [:]
                        object["id"] = nil
                        return .object(object)
                    }
                    if let difference = PredicateFixture.groupsDisagreement(dictionaries, fresh) {
                        XCTFail(
                            "seed \(seed) step \(step) subscription \(choice) of peer \(peer): \(difference)\nheld \(groups.map(\.object))\nfresh \(fresh)"
                        )
                    }
                    XCTAssertEqual(groups.map(\.id), fresh.map { id(of: $0, choice) }, "seed \(seed) step \(step): ids")
                    if Self.subscriptions[choice].params.contains("sectionKeyPath") {
                        var names: [String] = []
                        for group in fresh {
                            let name = group["zone"]?.stringValue ?? ""
                            if names.last != name { names.append(name) }
                        }
                        XCTAssertEqual(state.names, names, "seed \(seed) step \(step): sections")
                        XCTAssertFalse(
                            state.sections.contains { $0.isEmpty }, "seed \(seed) step \(step): an empty section")
                    }
                    held[peer]![slot] = state
                }
            }
        }

        func freshGroups(_ choice: Int) throws -> [JSONValue] {
            let params = try JSONParser.parse(Array(Self.subscriptions[choice].params.utf8))
            let request = String(decoding: JSONWriter.encode(params["request"]!), as: UTF8.self)
            return try call(writer, "store/fetch", request)["objects"]?.arrayValue ?? []
        }

        var held: [[UInt8]: [HeldResults]] = [:]
        for (peer, choices) in Self.sessions.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            _ = try call(peer, "initialize", #"{"protocolVersion": "1"}"#)
            for choice in choices {
                held[peer, default: []].append(
                    HeldResults(answer: try call(peer, "results/subscribe", Self.subscriptions[choice].params)))
            }
        }

        for step in 0..<30 {
            let roll = Int.random(in: 0..<100, using: &random)
            if roll < 45 {
                var insertedObjects: [String] = []
                for index in 0..<Int.random(in: 0...3, using: &random) {
                    insertedObjects.append(#"{"entity": "Play", "tempId": "n\#(index)", "values": \#(values())}"#)
                }
                var updated: [String] = []
                var deleted: [String] = []
                for id in Set(
                    (0..<Int.random(in: 0...3, using: &random)).compactMap { _ in live.randomElement(using: &random) })
                {
                    if Int.random(in: 0..<4, using: &random) == 0 {
                        deleted.append(#"{"id": "\#(id)"}"#)
                    } else {
                        updated.append(#"{"id": "\#(id)", "values": \#(values())}"#)
                    }
                }
                let result = try call(
                    writer, "store/save",
                    #"{"inserted": [\#(insertedObjects.joined(separator: ","))], "updated": [\#(updated.joined(separator: ","))], "deleted": [\#(deleted.joined(separator: ","))]}"#
                )
                inserted(result)
                live.removeAll { id in deleted.contains { $0.contains("\"\(id)\"") } }
            } else if roll < 60 {
                let objects = (0..<Int.random(in: 1...6, using: &random)).map { _ in values() }
                _ = try call(
                    writer, "store/batchInsert",
                    #"{"entity": "Play", "objects": [\#(objects.map { $0.replacingOccurrences(of: #", "club": null"#, with: "") }.joined(separator: ","))]}"#
                )
                live =
                    try call(writer, "store/fetch", #"{"entity": "Play", "resultType": "ids"}"#)["ids"]?.arrayValue?
                    .compactMap(\.stringValue) ?? live
            } else if roll < 75 {
                let predicate = ["wins < 2", "zone == 'B'", "score > 3", "day == nil"].randomElement(using: &random)!
                let change = [#"{"zone": "D"}"#, #"{"wins": 8}"#, #"{"score": 0.25}"#, #"{"zone": null}"#]
                    .randomElement(using: &random)!
                _ = try call(
                    writer, "store/batchUpdate",
                    #"{"entity": "Play", "predicate": "\#(predicate)", "values": \#(change)}"#)
            } else if roll < 85 {
                let predicate = ["zone == 'D'", "wins == 3", "score < 0"].randomElement(using: &random)!
                _ = try call(writer, "store/batchDelete", #"{"entity": "Play", "predicate": "\#(predicate)"}"#)
                live =
                    try call(writer, "store/fetch", #"{"entity": "Play", "resultType": "ids"}"#)["ids"]?.arrayValue?
                    .compactMap(\.stringValue) ?? live
            } else {
                let club = clubIDs.randomElement(using: &random)!
                let region = [#""North""#, #""South""#, #""East""#, "null"].randomElement(using: &random)!
                _ = try call(
                    writer, "store/save", #"{"updated": [{"id": "\#(club)", "values": {"region": \#(region)}}]}"#)
            }
            try check(&held, seed: seed, step: step, final: false)
        }
        try check(&held, seed: seed, step: 30, final: true)
    }

    /// `"group:"` + the JSON array of the group's groupBy values.
    private func id(of group: JSONValue, _ choice: Int) -> String {
        let values = Self.subscriptions[choice].groupBy.map { group[$0] ?? .null }
        return "group:" + String(decoding: JSONWriter.encode(.array(values)), as: UTF8.self)
    }
}
