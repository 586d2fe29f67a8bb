import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// Text is its UTF-8 bytes (DESIGN.md §4), in memory: random saves, batch
/// updates, deletes and uniqueness checks over look-alike strings (composed and
/// decomposed accents, Å / A + ring / Ångström sign, K / Kelvin sign, ﬁ / fi,
/// case, trailing spaces) under live subscriptions (sorted and sectioned,
/// filtered by equality on two spellings, by prefix, by `[cd]`, by IN, grouped).
/// After every step: every saved value reads back byte for byte; a save changes
/// exactly when the bytes differ; a batch update counts the rows whose bytes
/// matched; a unique key refuses exactly byte-equal values; every subscription
/// with its `results/didChange` applied equals a fresh fetch (sections by
/// bytes); and the SQL and the in-memory evaluator agree on a pool of predicates.
final class LookAlikeTextPropertyTests: XCTestCase {
    static let model = #"""
        {"entities": [
          {"name": "Word", "attributes": [{"name": "text", "type": "string", "optional": true},
             {"name": "n", "type": "integer", "default": 0}]},
          {"name": "Tag", "attributes": [{"name": "name", "type": "string"}], "uniquenessConstraints": [["name"]]}]}
        """#

    static let entities: [EntityDescription] = [
        EntityDescription(
            name: "Word",
            attributes: [
                AttributeDescription(name: "text", type: .string, optional: true),
                AttributeDescription(name: "n", type: .integer),
            ])
    ]

    /// The subscriptions: (params, whether grouped). Arguments carry look-alikes as JSON strings.
    static let subscriptions: [(JSONValue, Bool)] = {
        func request(_ predicate: String?, _ arguments: JSONValue? = nil, sort: [String] = ["n"]) -> JSONValue {
            var request: [String: JSONValue] = [
                "entity": "Word", "sort": .array(sort.map { ["key": .string($0)] }),
            ]
            if let predicate { request["predicate"] = .string(predicate) }
            if let arguments { request["arguments"] = arguments }
            return ["request": .object(request), "include": "all"]
        }
        var sectioned = request(nil, sort: ["text", "n"])
        sectioned = .object(sectioned.objectValue!.merging(["sectionKeyPath": "text"]) { $1 })
        let grouped: JSONValue = [
            "request": [
                "entity": "Word", "groupBy": ["text"], "aggregates": [["name": "count", "function": "count"]],
                "sort": [["key": "text"]],
            ],
            "sectionKeyPath": "text", "include": "all",
        ]
        return [
            (sectioned, false),
            // Two spellings of one request: two sets, each filed under its own bytes.
            (request("text == $v", ["v": "jos\u{E9}"]), false),
            (request("text == $v", ["v": "jose\u{301}"]), false),
            (request("text == '\u{212B}'"), false),
            (request("text BEGINSWITH 'jos'"), false),
            (request("text ==[cd] 'jose'"), false),
            (request("text IN $set", ["set": ["\u{C5}", "fi", "e\u{301}"]]), false),
            (request("text < 'f'", sort: ["text", "n"]), false),
            (grouped, true),
        ]
    }()

    func testLookAlikeTextStaysApartEverywhere() throws {
        var tally: [String: Int] = [:]
        for seed in 1...3 { try run(seed: UInt64(seed), tally: &tally) }
        // The random steps exercised every outcome the test asserts on.
        for kind in [
            "changed", "unchanged", "batch counted", "unique accepted", "unique refused", "notifications",
            "predicates", "section insert",
        ] {
            XCTAssertGreaterThan(tally[kind] ?? 0, 0, "no \(kind) in \(tally)")
        }
    }

    private func run(seed: UInt64, tally: inout [String: Int]) throws {
        let core = try CoreCaller(model: Self.model, name: "lookalike")
        let outbox = core.outbox
        var random = SeededGenerator(seed: seed)
        let writer: [UInt8] = [8]
        let watcher: [UInt8] = [1]
        func send(_ peer: [UInt8], _ method: String, _ params: JSONValue) throws -> JSONValue {
            try core.send(peer, method, params)
        }
        func call(_ peer: [UInt8], _ method: String, _ params: JSONValue) throws -> JSONValue {
            let response = try send(peer, method, params)
            guard let result = response["result"] else {
                XCTFail("seed \(seed): \(method) \(LookAlikeText.visible(params)) failed: \(response)")
                return .null
            }
            return result
        }
        _ = try call(writer, "initialize", ["protocolVersion": "1"])
        _ = try call(watcher, "initialize", ["protocolVersion": "1"])

        // What the store must hold: each word's text, each tag's name (bytes, by construction of String).
        var words: [String: String?] = [:]
        var tags: [String] = []
        func text() -> JSONValue {
            Int.random(in: 0..<8, using: &random) == 0 ? .null : .string(LookAlikeText.random(&random))
        }
        func groupID(_ row: JSONValue) -> String {
            "group:" + String(decoding: JSONWriter.encode([row["text"] ?? .null]), as: UTF8.self)
        }
        var held: [HeldResults] = []
        for (params, grouped) in Self.subscriptions {
            let answer = try call(watcher, "results/subscribe", params)
            held.append(HeldResults(answer: answer) { grouped ? groupID($0) : $0["id"]?.stringValue ?? "" })
        }
        var read = outbox.received(by: watcher).count

        func check(step: Int) throws {
            let place = "seed \(seed) step \(step)"
            // Every saved value reads back byte for byte.
            let all = try call(writer, "store/fetch", ["entity": "Word"])["objects"]?.arrayValue ?? []
            XCTAssertEqual(all.count, words.count, "\(place): words")
            for object in all {
                let id = object["id"]?.stringValue ?? ""
                let stored = object["text"]?.stringValue
                guard let expected = words[id] else { return XCTFail("\(place): \(id) should not exist") }
                XCTAssertTrue(
                    stored.map { s in expected.map { s.bytesEqual($0) } ?? false } ?? (expected == nil),
                    "\(place): \(id) reads back \(stored.map(LookAlikeText.visible) ?? "nil"), saved \(expected.map(LookAlikeText.visible) ?? "nil")"
                )
            }
            let storedTags = try call(writer, "store/fetch", ["entity": "Tag"])["objects"]?.arrayValue ?? []
            XCTAssertEqual(
                storedTags.compactMap { $0["name"]?.stringValue }.map { Array($0.utf8) }.sorted {
                    $0.lexicographicallyPrecedes($1)
                }, tags.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }, "\(place): tags")

            // Each subscription with its notifications applied equals a fresh fetch.
            let messages = outbox.received(by: watcher)
            for message in messages[read...] where message["method"] == "results/didChange" {
                let params = message["params"] ?? .null
                guard let index = held.firstIndex(where: { $0.subscription == params["subscription"]?.stringValue })
                else { continue }
                tally["notifications", default: 0] += 1
                for section in params["sections"]?.arrayValue ?? [] where section["type"] == "insert" {
                    tally["section insert", default: 0] += 1
                }
                if let problem = held[index].apply(params) {
                    XCTFail("\(place) subscription \(index): \(problem)")
                }
            }
            read = messages.count
            for (index, (params, grouped)) in Self.subscriptions.enumerated() {
                let fresh = try call(watcher, "store/fetch", params["request"]!)["objects"]?.arrayValue ?? []
                if grouped {
                    XCTAssertTrue(held[index].objects.allSatisfy { $0["id"]?.stringValue?.hasPrefix("group:") == true })
                }
                XCTAssertTrue(
                    (grouped ? LookAlikeText.withoutGroupIDs(held[index].objects) : held[index].objects) == fresh,
                    "\(place) subscription \(index): held \(LookAlikeText.visible(.array(held[index].objects)))\nfresh \(LookAlikeText.visible(.array(fresh)))"
                )
                if params["sectionKeyPath"] != nil {
                    var names: [String] = []
                    for object in fresh {
                        let name = object["text"]?.stringValue ?? ""
                        if !(names.last?.bytesEqual(name) ?? false) { names.append(name) }
                    }
                    XCTAssertEqual(
                        held[index].names.map { Array($0.utf8) }, names.map { Array($0.utf8) },
                        "\(place) subscription \(index): sections \(held[index].names.map(LookAlikeText.visible)) against \(names.map(LookAlikeText.visible))"
                    )
                }
                if grouped {
                    // One group per distinct byte string.
                    let distinct = Set(words.values.map { $0.map { ByteString($0) } })
                    XCTAssertEqual(fresh.count, distinct.count, "\(place): groups")
                }
            }
        }

        /// The SQL and the evaluator agree on predicates over look-alikes, with and without [c]/[d].
        func differential(step: Int) throws {
            let all = try call(writer, "store/fetch", ["entity": "Word"])["objects"]?.arrayValue ?? []
            let evaluator = PredicateEvaluator(model: Self.entities, object: { _ in nil }, toMany: { _, _ in [] })
            for _ in 0..<12 {
                let op = ["==", "!=", "<", ">=", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "IN"]
                    .randomElement(using: &random)!
                let options = ["", "[c]", "[d]", "[cd]"].randomElement(using: &random)!
                let value = LookAlikeText.random(&random)
                let literal = Bool.random(using: &random)
                let right: String
                let arguments: JSONValue?
                switch (op, literal) {
                case ("IN", _):
                    right = "$set"
                    arguments = ["set": [.string(value), .string(LookAlikeText.random(&random))]]
                case (_, true):
                    right = "'\(value)'"
                    arguments = nil
                default:
                    right = "$v"
                    arguments = ["v": .string(value)]
                }
                let predicate = "text \(op)\(options) \(right)"
                var request: [String: JSONValue] = [
                    "entity": "Word", "predicate": .string(predicate), "resultType": "ids",
                ]
                if let arguments { request["arguments"] = arguments }
                let sql = Set(
                    (try call(writer, "store/fetch", .object(request))["ids"]?.arrayValue ?? []).compactMap(
                        \.stringValue))
                let node = try PredicateParser.parse(predicate, arguments: arguments ?? .null)
                var memory = Set<String>()
                for object in all where try evaluator.evaluate(node, on: object.objectValue!, entity: "Word") {
                    memory.insert(object["id"]!.stringValue!)
                }
                tally["predicates", default: 0] += 1
                XCTAssertEqual(
                    sql, memory,
                    "seed \(seed) step \(step): \(LookAlikeText.visible(predicate)) \(arguments.map(LookAlikeText.visible) ?? "")"
                )
            }
        }

        for step in 0..<50 {
            let ids = words.keys.sorted()
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<30:
                let inserted: [JSONValue] = (0..<Int.random(in: 1...3, using: &random)).map { index in
                    ["entity": "Word", "tempId": .string("w\(index)"), "values": ["text": text()]]
                }
                let result = try call(writer, "store/save", ["inserted": .array(inserted)])
                for (index, object) in inserted.enumerated() {
                    guard let id = result["ids"]?["w\(index)"]?.stringValue else { continue }
                    words[id] = object["values"]?["text"]?.stringValue
                }
            case 30..<55 where !ids.isEmpty:
                // An update to another spelling changes the row; to the same bytes, nothing.
                let id = ids.randomElement(using: &random)!
                let new = Bool.random(using: &random) ? (words[id]!.map(JSONValue.string) ?? text()) : text()
                let result = try call(
                    writer, "store/save", ["updated": [["id": .string(id), "values": ["text": new]]]])
                let old = words[id]!
                let same = (old.map(JSONValue.string) ?? .null) == new
                XCTAssertEqual(
                    result["transaction"]?.intValue == 0, same,
                    "seed \(seed) step \(step): \(LookAlikeText.visible(old ?? "nil")) → \(LookAlikeText.visible(new))")
                tally[same ? "unchanged" : "changed", default: 0] += 1
                words[id] = new.stringValue
            case 55..<70:
                let from = LookAlikeText.random(&random)
                let to = LookAlikeText.random(&random)
                let result = try call(
                    writer, "store/batchUpdate",
                    [
                        "entity": "Word", "predicate": "text == $v", "arguments": ["v": .string(from)],
                        "values": ["text": .string(to)],
                    ])
                let matching = words.filter { $0.value.map { $0.bytesEqual(from) } ?? false }.map(\.key)
                XCTAssertEqual(
                    result["count"]?.intValue, Int64(from.bytesEqual(to) ? 0 : matching.count),
                    "seed \(seed) step \(step): batchUpdate \(LookAlikeText.visible(from)) → \(LookAlikeText.visible(to))"
                )
                if !matching.isEmpty && !from.bytesEqual(to) { tally["batch counted", default: 0] += 1 }
                for id in matching { words[id] = to }
            case 70..<80 where !ids.isEmpty:
                let id = ids.randomElement(using: &random)!
                _ = try call(writer, "store/save", ["deleted": [["id": .string(id)]]])
                words[id] = nil
            default:
                // A unique key refuses exactly byte-equal names: in one save, against the store, in a batch.
                let names = (0..<Int.random(in: 1...2, using: &random)).map { _ in LookAlikeText.random(&random) }
                let clash =
                    names.contains { name in tags.contains { $0.bytesEqual(name) } }
                    || (names.count == 2 && names[0].bytesEqual(names[1]))
                let response: JSONValue
                if Bool.random(using: &random) {
                    response = try send(
                        writer, "store/save",
                        [
                            "inserted": .array(
                                names.enumerated().map {
                                    ["entity": "Tag", "tempId": .string("t\($0)"), "values": ["name": .string($1)]]
                                })
                        ])
                } else {
                    response = try send(
                        writer, "store/batchInsert",
                        [
                            "entity": "Tag", "objects": .array(names.map { ["name": .string($0)] }),
                            "onConflict": "error",
                        ])
                }
                XCTAssertEqual(
                    response["error"]?["code"]?.intValue, clash ? -32011 : nil,
                    "seed \(seed) step \(step): tags \(names.map(LookAlikeText.visible)) with \(tags.map(LookAlikeText.visible)): \(response)"
                )
                if response["result"] != nil { tags += names }
                tally[clash ? "unique refused" : "unique accepted", default: 0] += 1
            }
            try check(step: step)
            if step % 5 == 0 { try differential(step: step) }
        }
    }
}
