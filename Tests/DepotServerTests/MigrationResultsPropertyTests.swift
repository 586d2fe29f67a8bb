import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Live results across migrations (DESIGN.md §7, Across a migration), in memory: random
/// migrations (attributes added with and without a default, renames, new relationships and
/// indexes) between random saves, under sorted, filtered, windowed, sectioned, coalescing,
/// `properties` and grouped subscriptions. After every step each subscription's first results
/// with every `results/didChange` applied equal a fresh fetch (a key missing from a held object
/// reads as nil: an attribute added without a default changes no value). A subscription whose
/// request names a key a migration renames ends with `results/didInvalidate {reason: "model"}`,
/// and only it.
final class MigrationResultsPropertyTests: XCTestCase {
    static let club = #"{"name": "Club", "attributes": [{"name": "name", "type": "string"}]}"#

    /// The subscriptions: the params, and whether the rows are groups.
    static let subscriptions: [(params: String, grouped: Bool)] = [
        (#"{"request": {"entity": "Play", "sort": [{"key": "wins"}]}, "include": "all"}"#, false),
        (
            #"{"request": {"entity": "Play", "sort": [{"key": "zone"}, {"key": "wins", "ascending": false}]}, "sectionKeyPath": "zone", "include": "all"}"#,
            false
        ),
        (
            #"{"request": {"entity": "Play", "predicate": "wins >= 2", "sort": [{"key": "wins", "ascending": false}], "limit": 4}, "include": "all"}"#,
            false
        ),
        (
            #"{"request": {"entity": "Play", "properties": ["zone", "wins"], "sort": [{"key": "wins"}]}, "include": "all"}"#,
            false
        ),
        (
            #"{"request": {"entity": "Play", "predicate": "club.name != nil", "sort": [{"key": "wins"}]}, "include": "all", "coalesceMs": 30}"#,
            false
        ),
        (
            #"{"request": {"entity": "Play", "groupBy": ["zone"], "aggregates": [{"name": "n", "function": "count"}, {"name": "total", "function": "sum", "key": "wins"}], "sort": [{"key": "zone"}]}, "sectionKeyPath": "zone", "include": "all"}"#,
            true
        ),
    ]

    /// Names `tag`, which one migration renames: it ends with reason "model".
    static let renamedOne =
        #"{"request": {"entity": "Play", "sort": [{"key": "tag"}]}, "include": "all"}"#

    func testDeltasReproduceAFreshFetchAcrossRandomMigrations() throws {
        var kinds: [String: Int] = [:]
        for seed in 1...4 { try run(seed: UInt64(seed), kinds: &kinds) }
        for kind in ["insert", "delete", "move", "update", "migration update", "model invalidation"] {
            XCTAssertGreaterThan(kinds[kind] ?? 0, 0, "no \(kind) in \(kinds)")
        }
    }

    /// One subscription as a session holds it.
    private struct Held {
        var results: HeldResults
        var ended = false
    }

    /// One attribute of `Play` beyond the fixed ones, as the test defines it.
    private struct Extra {
        var name: String
        var type: String
        var defaultValue: String?
        var renamedFrom: String?
        var indexed = false

        var json: String {
            var members = [#""name": "\#(name)""#, #""type": "\#(type)""#, #""optional": true"#]
            if let defaultValue { members.append(#""default": \#(defaultValue)"#) }
            if let renamedFrom { members.append(#""renamedFrom": "\#(renamedFrom)""#) }
            if indexed { members.append(#""indexed": true"#) }
            return "{" + members.joined(separator: ", ") + "}"
        }
    }

    private func run(seed: UInt64, kinds: inout [String: Int]) throws {
        var extras = [Extra(name: "tag", type: "string", defaultValue: nil)]
        var links: [String] = []
        var indexes: [String] = []
        func play() -> String {
            let attributes =
                [
                    #"{"name": "zone", "type": "string", "optional": true}"#,
                    #"{"name": "wins", "type": "integer", "default": 0}"#,
                ] + extras.map(\.json)
            let relationships =
                [#"{"name": "club", "destination": "Club", "optional": true}"#]
                + links.map { #"{"name": "\#($0)", "destination": "Club", "optional": true}"# }
            return
                #"{"name": "Play", "attributes": [\#(attributes.joined(separator: ", "))], "relationships": [\#(relationships.joined(separator: ", "))], "indexes": [\#(indexes.joined(separator: ", "))]}"#
        }
        let core = try CoreCaller(
            model: #"{"entities": [\#(Self.club), \#(play())]}"#, name: "migration", label: "seed \(seed)")
        let outbox = core.outbox
        var random = SeededGenerator(seed: seed)
        func pick<T>(_ choices: [T]) -> T { choices.randomElement(using: &random)! }
        let writer: [UInt8] = [8]
        let reader: [UInt8] = [1]
        func call(_ peer: [UInt8], _ method: String, _ params: String) throws -> JSONValue {
            try core.call(peer, method, params)
        }
        _ = try call(writer, "initialize", #"{"protocolVersion": "1"}"#)
        _ = try call(reader, "initialize", #"{"protocolVersion": "1"}"#)
        let clubs = try call(
            writer, "store/save",
            #"{"inserted": [{"entity": "Club", "tempId": "a", "values": {"name": "a"}}, {"entity": "Club", "tempId": "b", "values": {"name": "b"}}]}"#
        )
        let clubIDs = ["a", "b"].compactMap { clubs["ids"]?[$0]?.stringValue }
        var live: [String] = []
        func values() -> String {
            var members = [
                #""zone": \#(pick([#""A""#, #""B""#, #""C""#, "null"]))"#,
                #""wins": \#(pick(["0", "1", "2", "3", "5"]))"#,
                #""club": \#(pick(clubIDs.map { "\"\($0)\"" } + ["null"]))"#,
            ]
            for extra in extras where Bool.random(using: &random) {
                members.append(
                    #""\#(extra.name)": \#(extra.type == "string" ? pick([#""x""#, #""y""#, "null"]) : pick(["7", "-1", "null"]))"#
                )
            }
            for link in links where Bool.random(using: &random) {
                members.append(#""\#(link)": \#(pick(clubIDs.map { "\"\($0)\"" } + ["null"]))"#)
            }
            return "{" + members.joined(separator: ", ") + "}"
        }
        let first = (0..<10).map { #"{"entity": "Play", "tempId": "p\#($0)", "values": \#(values())}"# }
        live +=
            try call(writer, "store/save", #"{"inserted": [\#(first.joined(separator: ","))]}"#)["ids"]?
            .objectValue?.values.compactMap(\.stringValue) ?? []

        var held: [Held] = []
        for choice in Self.subscriptions.map(\.params) + [Self.renamedOne] {
            held.append(Held(results: HeldResults(answer: try call(reader, "results/subscribe", choice))))
        }
        var read = outbox.received(by: reader).count
        let renamedSlot = held.count - 1
        var tagRenamed = false

        /// Applies the reader's new notifications, then compares each subscription with a fresh fetch.
        func check(step: Int, migration: JSONValue?) throws {
            let context = "seed \(seed) step \(step)"
            // The coalescing subscription's open window is announced before a snapshot's answer.
            for slot in Self.subscriptions.indices
            where !held[slot].ended && Self.subscriptions[slot].params.contains("coalesceMs") {
                _ = try call(reader, "results/snapshot", #"{"subscription": "\#(held[slot].results.subscription)"}"#)
            }
            let messages = outbox.received(by: reader)
            for message in messages[read...] {
                let params = message["params"] ?? .null
                guard
                    let slot = held.firstIndex(where: { $0.results.subscription == params["subscription"]?.stringValue }
                    )
                else { continue }
                if message["method"] == "results/didInvalidate" {
                    XCTAssertEqual(params["reason"], "model", "\(context): \(message)")
                    XCTAssertEqual(slot, renamedSlot, "\(context): only the request naming tag ends: \(message)")
                    XCTAssertNotNil(migration, "\(context): an invalidation without a migration")
                    held[slot].ended = true
                    kinds["model invalidation", default: 0] += 1
                    continue
                }
                guard message["method"] == "results/didChange" else { continue }
                XCTAssertFalse(held[slot].ended, "\(context): a change after the invalidation")
                let objects = params["objects"]?.arrayValue ?? []
                for object in objects { kinds[object["type"]?.stringValue ?? "", default: 0] += 1 }
                if let migration, params["transaction"] == migration["transaction"] {
                    // The migration's own notification: updates only, of the transaction the define answered.
                    XCTAssertEqual(
                        Set(objects.compactMap { $0["type"]?.stringValue }), ["update"], "\(context): \(params)")
                    kinds["migration update", default: 0] += objects.count
                }
                if let problem = held[slot].results.apply(params) { XCTFail("\(context): \(problem)") }
            }
            read = outbox.received(by: reader).count
            for (slot, state) in held.enumerated() where !state.ended {
                let params = try JSONParser.parse(
                    Array((slot == renamedSlot ? Self.renamedOne : Self.subscriptions[slot].params).utf8))
                let fresh =
                    try call(
                        writer, "store/fetch", String(decoding: JSONWriter.encode(params["request"]!), as: UTF8.self))[
                        "objects"]?.arrayValue ?? []
                let rows = state.results.sections.flatMap { $0 }
                for row in rows {
                    XCTAssertEqual(row.object["id"]?.stringValue, row.id, "\(context): row \(slot) carries its id")
                }
                let grouped = slot != renamedSlot && Self.subscriptions[slot].grouped
                let heldObjects = rows.map { Self.normalized($0.object, droppingID: grouped) }
                let freshObjects = fresh.map { Self.normalized($0, droppingID: false) }
                XCTAssertEqual(
                    heldObjects, freshObjects,
                    "\(context): subscription \(slot) after its deltas is not a fresh fetch\nheld \(heldObjects)\nfresh \(freshObjects)"
                )
                if params["sectionKeyPath"] != nil {
                    var names: [String] = []
                    for object in fresh {
                        let name = object["zone"]?.stringValue ?? ""
                        if names.last != name { names.append(name) }
                    }
                    XCTAssertEqual(state.results.names, names, "\(context): sections of \(slot)")
                }
            }
        }

        var migrations = 0
        for step in 0..<24 {
            var migration: JSONValue?
            if Int.random(in: 0..<100, using: &random) < 40 {
                migrations += 1
                let kind = Int.random(in: 0..<6, using: &random)
                switch kind {
                case 0:
                    extras.append(Extra(name: "a\(migrations)", type: pick(["string", "integer"]), defaultValue: nil))
                case 1:
                    extras.append(Extra(name: "d\(migrations)", type: "integer", defaultValue: "\(migrations)"))
                case 2:
                    extras.append(Extra(name: "s\(migrations)", type: "string", defaultValue: #""s\#(migrations)""#))
                case 3:
                    // A rename: of tag once (ending the subscription that names it), else of another extra.
                    let index =
                        !tagRenamed ? 0 : Int.random(in: 0..<extras.count, using: &random)
                    tagRenamed = true
                    let (old, new) = (extras[index].name, "r\(migrations)")
                    extras[index].renamedFrom = old
                    extras[index].name = new
                    indexes = indexes.map { $0.replacingOccurrences(of: "\"\(old)\"", with: "\"\(new)\"") }
                case 4:
                    links.append("link\(migrations)")
                default:
                    if Bool.random(using: &random), let extra = extras.indices.randomElement(using: &random) {
                        extras[extra].indexed.toggle()
                    } else {
                        let index = #"["wins", "\#(pick(["zone"] + extras.map(\.name)))"]"#
                        if !indexes.contains(index) { indexes.append(index) } else { links.append("link\(migrations)") }
                    }
                }
                migration = try call(writer, "model/define", #"{"entities": [\#(play())]}"#)
                XCTAssertNotNil(migration?["transaction"]?.intValue, "seed \(seed): a migration is a transaction")
            } else {
                var inserted: [String] = []
                for index in 0..<Int.random(in: 0...3, using: &random) {
                    inserted.append(#"{"entity": "Play", "tempId": "n\#(index)", "values": \#(values())}"#)
                }
                var updated: [String] = []
                var deleted: [String] = []
                for id in Set(
                    (0..<Int.random(in: 0...3, using: &random)).compactMap { _ in live.randomElement(using: &random) })
                {
                    if Int.random(in: 0..<4, using: &random) == 0 {
                        deleted.append(id)
                    } else {
                        updated.append(#"{"id": "\#(id)", "values": \#(values())}"#)
                    }
                }
                let result = try call(
                    writer, "store/save",
                    #"{"inserted": [\#(inserted.joined(separator: ","))], "updated": [\#(updated.joined(separator: ","))], "deleted": [\#(deleted.map { #"{"id": "\#($0)"}"# }.joined(separator: ","))]}"#
                )
                live += result["ids"]?.objectValue?.values.compactMap(\.stringValue) ?? []
                live.removeAll { deleted.contains($0) }
            }
            try check(step: step, migration: migration)
        }
    }

    /// An object as compared: members whose value is nil left out (a key an object lacks reads as
    /// nil), and a group's `id` (a grouped fetch's dictionaries have none).
    private static func normalized(_ object: JSONValue, droppingID: Bool) -> JSONValue {
        guard var members = object.objectValue else { return object }
        members = members.filter { !$0.value.isNull }
        if droppingID { members["id"] = nil }
        return .object(members)
    }
}
