import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Scoped prefetch under the scope oracle (DESIGN.md §2, §5, §7), in memory: two keys whose
/// read scopes cut both the rows (Notes: their own or shared) and the related objects (Folders:
/// their own) follow live results with `prefetch: ["folder.notes"]` while an unscoped writer
/// saves at random. After every step, for each key, the related ids it holds are exactly those
/// the scope rules, evaluated here in memory on the unscoped store, let it reach from its rows
/// (no object outside its scope, live or fetched); its related objects carry the store's
/// values; and its applied deltas equal its own fresh fetch.
final class PrefetchScopeOracleTests: XCTestCase {
    static let model = #"""
        {"entities": [
          {"name": "Folder", "attributes": [{"name": "name", "type": "string"}, {"name": "owner", "type": "string"}],
           "relationships": [{"name": "notes", "destination": "Note", "toMany": true, "inverse": "folder"}]},
          {"name": "Note", "attributes": [{"name": "title", "type": "string"}, {"name": "owner", "type": "string"},
             {"name": "shared", "type": "boolean", "default": false}],
           "relationships": [{"name": "folder", "destination": "Folder", "inverse": "notes"}]}
        ]}
        """#

    static let policy = #"""
        {"roles": {"member": {"base": "read", "entities": {
            "Note": {"read": "owner == $keyName OR shared == YES"},
            "Folder": {"read": "owner == $keyName"}}}}}
        """#

    static let names = ["ann", "ben"]
    static let keys = names.enumerated().map { "\(CoreKeys.publicKey($0 + 1)) member \($1)" }.joined(
        separator: "\n")
    static let fetch = #"{"entity": "Note", "sort": [{"key": "title"}], "prefetch": ["folder.notes"]}"#

    func testNoRelatedObjectOutsideAKeysScopeReachesItLiveOrFetched() throws {
        var reached = 0
        for seed in 1...3 { reached += try run(seed: UInt64(seed)) }
        XCTAssertGreaterThan(reached, 20, "the keys reached related objects")
    }

    /// One seeded run; returns how many related objects the keys held at the checks.
    private func run(seed: UInt64) throws -> Int {
        let core = try CoreCaller(
            model: Self.model, name: "prefetch-oracle", keys: Self.keys, policy: Self.policy, label: "seed \(seed)")
        let outbox = core.outbox
        var random = SeededGenerator(seed: seed)
        let writer: [UInt8] = [9]
        func call(_ peer: [UInt8], key: String? = nil, _ method: String, _ params: String) throws -> JSONValue {
            try core.call(peer, key: key, method, params)
        }
        func pick<T>(_ choices: [T]) -> T { choices.randomElement(using: &random)! }
        let owners = Self.names + ["cat"]

        var folders: [String] = []
        var notes: [String] = []
        func save(_ params: String) throws {
            let result = try call(writer, "store/save", params)
            for id in result["ids"]?.objectValue?.values.compactMap(\.stringValue) ?? [] {
                if id.hasPrefix("Folder/") { folders.append(id) } else { notes.append(id) }
            }
        }
        func folderValue() -> String {
            folders.isEmpty || Bool.random(using: &random) ? "null" : "\"\(pick(folders))\""
        }
        func noteValues(_ index: Int) -> String {
            #"{"title": "t\#(index)", "owner": "\#(pick(owners))", "shared": \#(Bool.random(using: &random)), "folder": \#(folderValue())}"#
        }
        try save(
            #"{"inserted": [\#((0..<4).map { #"{"entity": "Folder", "tempId": "f\#($0)", "values": {"name": "f\#($0)", "owner": "\#(owners[$0 % 3])"}}"# }.joined(separator: ","))]}"#
        )
        try save(
            #"{"inserted": [\#((0..<10).map { #"{"entity": "Note", "tempId": "n\#($0)", "values": \#(noteValues($0))}"# }.joined(separator: ","))]}"#
        )

        // Each key's session and subscription.
        let peers: [[UInt8]] = [[1], [2]]
        var held: [HeldResults] = []
        for (index, peer) in peers.enumerated() {
            _ = try call(peer, key: CoreKeys.publicKey(index + 1), "initialize", #"{"protocolVersion": "1"}"#)
            held.append(
                HeldResults(
                    answer: try call(
                        peer, key: CoreKeys.publicKey(index + 1), "results/subscribe",
                        #"{"request": \#(Self.fetch), "include": "all"}"#)))
        }

        var reached = 0
        func check(step: Int) throws {
            // The unscoped store, and the scope rules evaluated on it in memory.
            let all = try call(writer, "store/fetch", #"{"entity": "Note", "sort": [{"key": "title"}]}"#)
            let folderObjects = try call(writer, "store/fetch", #"{"entity": "Folder"}"#)
            let noteByID = Dictionary(
                uniqueKeysWithValues: (all["objects"]?.arrayValue ?? []).map { ($0["id"]?.stringValue ?? "", $0) })
            let folderByID = Dictionary(
                uniqueKeysWithValues: (folderObjects["objects"]?.arrayValue ?? []).map {
                    ($0["id"]?.stringValue ?? "", $0)
                })
            for (index, name) in Self.names.enumerated() {
                let context = "seed \(seed) step \(step) key \(name)"
                func seesNote(_ note: JSONValue) -> Bool {
                    note["owner"]?.stringValue.map { $0.bytesEqual(name) } == true || note["shared"] == true
                }
                func seesFolder(_ folder: JSONValue) -> Bool {
                    folder["owner"]?.stringValue.map { $0.bytesEqual(name) } == true
                }
                if let problem = held[index].catchUp(with: outbox.received(by: peers[index])) {
                    XCTFail("\(context): \(problem)")
                }
                // Rows: exactly the notes the rule lets it read.
                let rows = held[index].objects
                let expectedRows = (all["objects"]?.arrayValue ?? []).filter(seesNote)
                XCTAssertEqual(rows.map(\.["id"]), expectedRows.map(\.["id"]), "\(context): rows")
                // Related: folder → notes, each hop through what the rules let it read.
                var expected: Set<String> = []
                for row in expectedRows {
                    guard let folderID = row["folder"]?.stringValue, let folder = folderByID[folderID],
                        seesFolder(folder)
                    else { continue }
                    expected.insert(folderID)
                    for note in noteByID.values where note["folder"]?.stringValue == folderID && seesNote(note) {
                        expected.insert(note["id"]?.stringValue ?? "")
                    }
                }
                let related = held[index].related
                XCTAssertEqual(Set(related.keys), expected, "\(context): related ids")
                for (id, object) in related {
                    let stored = id.hasPrefix("Folder/") ? folderByID[id] : noteByID[id]
                    for key in ["name", "owner", "title", "shared"] where stored?[key] != nil {
                        XCTAssertEqual(object[key], stored?[key], "\(context): \(id).\(key)")
                    }
                }
                reached += related.count
                // The delta oracle: its applied deltas are its own fresh fetch, related objects included.
                let fresh = try call(peers[index], key: CoreKeys.publicKey(index + 1), "store/fetch", Self.fetch)
                XCTAssertEqual(rows, fresh["objects"]?.arrayValue ?? [], "\(context): rows vs a fresh fetch")
                XCTAssertEqual(related, fresh["related"]?.objectValue ?? [:], "\(context): related vs a fresh fetch")
            }
        }

        try check(step: 0)
        for step in 1...30 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0...3 where !notes.isEmpty:
                // A note changes owner, sharing or folder: rows and related objects enter and leave.
                let values = pick([
                    #"{"owner": "\#(pick(owners))"}"#, #"{"shared": \#(Bool.random(using: &random))}"#,
                    #"{"folder": \#(folderValue())}"#, #"{"title": "t\#(step)x"}"#,
                ])
                try save(#"{"updated": [{"id": "\#(pick(notes))", "values": \#(values)}]}"#)
            case 4...5 where !folders.isEmpty:
                // A folder changes owner (enters or leaves a key's scope) or name.
                let values = pick([#"{"owner": "\#(pick(owners))"}"#, #"{"name": "f\#(step)"}"#])
                try save(#"{"updated": [{"id": "\#(pick(folders))", "values": \#(values)}]}"#)
            case 6 where notes.count > 3:
                let id = pick(notes)
                notes.removeAll { $0 == id }
                try save(#"{"deleted": [{"id": "\#(id)"}]}"#)
            case 7 where folders.count > 2:
                let id = pick(folders)
                folders.removeAll { $0 == id }
                try save(#"{"deleted": [{"id": "\#(id)"}]}"#)
            case 8:
                try save(
                    #"{"inserted": [{"entity": "Folder", "tempId": "f", "values": {"name": "n\#(step)", "owner": "\#(pick(owners))"}}]}"#
                )
            default:
                try save(#"{"inserted": [{"entity": "Note", "tempId": "n", "values": \#(noteValues(100 + step))}]}"#)
            }
            try check(step: step)
        }
        return reached
    }
}
