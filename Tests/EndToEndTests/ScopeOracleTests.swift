import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// The scope oracle (DESIGN.md §2, Row-level scopes), over a real daemon: keys
/// with random read and write scopes send random inserts, updates and deletes.
/// After every step, for each key, its fetch and its subscription (deltas
/// applied) equal the unscoped fetch filtered by its scope in memory, no delta
/// reaches a key whose visible objects did not change, each key's
/// `store/didSave` reports exactly the change it can see (an object updated out
/// of its scope or deleted is a delete, one updated into it an insert; nothing
/// when it sees none, and no value outside the scope), every write outside
/// a key's write scope is -32018 with the store unchanged, and at the end each
/// key's `store/history` from the start (paged) repeats its didSaves
/// transaction by transaction. Fixed seeds.
final class ScopeOracleTests: XCTestCase {
    /// A scope rule: the policy's text and the same rule evaluated in memory.
    struct Rule {
        let text: String
        let holds: @Sendable (_ note: JSONValue, _ key: Key) -> Bool
    }

    /// A key: its name and its `team=` attribute.
    struct Key {
        let name: String
        let team: String
    }

    static let readRules: [Rule] = [
        Rule(text: "owner == $keyName") { note, key in note["owner"]?.stringValue == key.name },
        Rule(text: "owner == $keyName OR shared == YES") { note, key in
            note["owner"]?.stringValue == key.name || note["shared"]?.boolValue == true
        },
        Rule(text: "team == $team") { note, key in note["team"]?.stringValue == key.team },
        Rule(text: "rank >= 2") { note, _ in (note["rank"]?.intValue ?? 0) >= 2 },
        Rule(text: "team == $team AND rank < 3") { note, key in
            note["team"]?.stringValue == key.team && (note["rank"]?.intValue ?? 0) < 3
        },
        Rule(text: "TRUEPREDICATE") { _, _ in true },
    ]

    static let writeRules: [Rule] = [
        Rule(text: "owner == $keyName") { note, key in note["owner"]?.stringValue == key.name },
        Rule(text: "team == $team") { note, key in note["team"]?.stringValue == key.team },
        Rule(text: "rank < 3") { note, _ in (note["rank"]?.intValue ?? 0) < 3 },
        Rule(text: "owner == $keyName AND rank != 4") { note, key in
            note["owner"]?.stringValue == key.name && (note["rank"]?.intValue ?? 0) != 4
        },
    ]

    static let model = #"""
        {"entities": [{"name": "Note", "attributes": [{"name": "title", "type": "string"},
          {"name": "owner", "type": "string"}, {"name": "team", "type": "string"},
          {"name": "shared", "type": "boolean", "default": false}, {"name": "rank", "type": "integer", "default": 0}]}]}
        """#

    static let names = ["ann", "ben", "cat", "dan"]
    static let teams = ["red", "blue"]

    func testScopeOracle() async throws {
        for seed: UInt64 in [7, 2026] { try await runOracle(seed: seed, steps: 40) }
    }

    /// Two keys whose names are look-alikes (`jos\u{E9}` and `jose\u{301}`: canonically equivalent,
    /// different bytes), role `owner == $keyName`, saving notes whose titles are look-alikes too: each
    /// fetches, counts and reads in history only its own notes, byte for byte, and no delta and no
    /// didSave of one reaches the other.
    func testLookAlikeKeysNeverSeeEachOthersRows() async throws {
        let names = ["jos\u{E9}", "jose\u{301}"]
        let titles = ["caf\u{E9}", "cafe\u{301}"]
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-lookalike-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try CurveKeyPair.generate()
        let pairs = try names.map { _ in try CurveKeyPair.generate() }
        let keyLines = zip(pairs, names).map { "\($0.publicKey) owner \($1)\n" }.joined()
        let policy =
            #"{"roles": {"owner": {"base": "write", "entities": {"Note": {"read": "owner == $keyName", "write": "owner == $keyName"}}}}}"#
        let daemon = try Self.daemon(in: directory, server: server, keyLines: keyLines, policy: policy)
        defer { XCTAssertEqual(daemon.stop(), 0) }
        var connections: [DepotConnection] = []
        for (pair, name) in zip(pairs, names) {
            connections.append(
                try await DepotConnection.connect(
                    to: daemon.endpoint, clientInfo: ImplementationInfo(name: name, version: "1"),
                    timeout: .seconds(10), keys: try ClientKeys(serverKey: server.publicKey, secretKey: pair.secretKey))
            )
        }
        defer { connections.forEach { $0.abort() } }
        let bytes = { (text: String?) in text.map { Array($0.utf8) } }
        // The same request from both: their effective requests differ by the bytes of $keyName.
        let request = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")])
        var collectors: [ChangeCollector] = []
        var subscriptions: [String] = []
        var observers: [String] = []
        for connection in connections {
            collectors.append(ChangeCollector(connection))
            subscriptions.append(
                try await connection.call(ResultsSubscribe.self, .init(request: request, include: .all)).subscription)
            observers.append(
                try await connection.call(StoreObserve.self, .init(entities: ["Note"], includeValues: true)).observer)
        }
        var own: [Set<String>] = [[], []]
        for (index, connection) in connections.enumerated() {
            for title in titles {
                let saved = try await connection.call(
                    StoreSave.self,
                    .init(inserted: [
                        InsertedObject(
                            entity: "Note", tempId: "n",
                            values: ["title": .string(title), "owner": .string(names[index]), "team": "red"])
                    ]))
                own[index].formUnion(saved.ids.values)
            }
        }
        for index in names.indices {
            let other = own[1 - index]
            let name = names[index].unicodeScalars.map { String($0.value, radix: 16) }.joined(separator: "+")
            let fetched = try await connections[index].call(StoreFetch.self, request).objects ?? []
            XCTAssertEqual(Set(fetched.compactMap { $0["id"]?.stringValue }), own[index], "\(name)'s fetch")
            for object in fetched {
                XCTAssertEqual(bytes(object["owner"]?.stringValue), bytes(names[index]), "\(name)'s fetch")
            }
            let count = try await connections[index].call(StoreCount.self, request).count
            XCTAssertEqual(count, 2, "\(name)'s count")
            let history = try await connections[index].call(StoreHistory.self, .init(since: 0))
            let historyIDs = history.transactions.flatMap { entry in
                entry.changes.values.flatMap { $0.inserted + $0.updated.map(\.id) + $0.deleted }
            }
            XCTAssertEqual(Set(historyIDs), own[index], "\(name)'s history")
            // Everything it heard: deltas and didSaves name only its own notes, with its own values.
            try await Task.sleep(for: .milliseconds(300))
            for note in collectors[index].drain() {
                if let change = note.decode(ResultsDidChange.self) {
                    XCTAssertEqual(change.subscription, subscriptions[index], "\(name) heard another's set")
                    for object in change.objects {
                        if let value = object.object {
                            XCTAssertEqual(bytes(value["owner"]?.stringValue), bytes(names[index]), "\(name)'s delta")
                        }
                    }
                }
                if let save = note.decode(DidSave.self) {
                    XCTAssertEqual(save.observer, observers[index], "\(name) heard another's observer")
                    let ids = save.changes.values.flatMap { $0.inserted + $0.updated.map(\.id) + $0.deleted }
                    XCTAssertTrue(other.isDisjoint(with: ids), "\(name)'s didSave named the other's notes: \(ids)")
                    for (_, value) in save.objects ?? [:] {
                        XCTAssertEqual(bytes(value["owner"]?.stringValue), bytes(names[index]), "\(name)'s didSave")
                    }
                }
            }
        }
    }

    /// A daemon over `directory` with ``model``, the CURVE key pair `server`, the authorized keys
    /// `keyLines` and the policy `policy`.
    static func daemon(in directory: URL, server: CurveKeyPair, keyLines: String, policy: String) throws -> Daemon {
        try server.secretKey.write(
            to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        try Self.model.write(to: directory.appendingPathComponent("model.json"), atomically: true, encoding: .utf8)
        try keyLines.write(to: directory.appendingPathComponent("keys"), atomically: true, encoding: .utf8)
        try policy.write(to: directory.appendingPathComponent("policy.json"), atomically: true, encoding: .utf8)
        return try Daemon(
            dataDirectory: directory.appendingPathComponent("data"),
            arguments: [
                "--curve-secret-key", directory.appendingPathComponent("server.key").path,
                "--authorized-keys", directory.appendingPathComponent("keys").path,
                "--policy", directory.appendingPathComponent("policy.json").path,
                "--model", directory.appendingPathComponent("model.json").path,
            ])
    }

    /// The server error `body` threw, `nil` when it succeeded; other errors are rethrown.
    static func serverError(_ body: () async throws -> Void) async throws -> RPCError? {
        do {
            try await body()
            return nil
        } catch {
            switch error as? DepotClientError {
            case .server(let rpcError)?: return rpcError
            default: throw error
            }
        }
    }

    /// Random owner, team, shared flag and rank.
    static func randomValues(_ random: inout SeededGenerator) -> [String: JSONValue] {
        [
            "owner": .string(names.randomElement(using: &random)!),
            "team": .string(teams.randomElement(using: &random)!),
            "shared": .bool(Bool.random(using: &random)), "rank": .int(Int64.random(in: 0...4, using: &random)),
        ]
    }

    private func runOracle(seed: UInt64, steps: Int) async throws {
        var random = SeededGenerator(seed: seed)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-oracle-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try CurveKeyPair.generate()
        // Each key its own role with random rules; an admin key without a scope.
        var pairs: [String: CurveKeyPair] = [:]
        var keys: [Key] = []
        var reads: [Rule] = []
        var writes: [Rule] = []
        var keyLines = ""
        var roles: [String: JSONValue] = [:]
        for (index, name) in Self.names.enumerated() {
            let pair = try CurveKeyPair.generate()
            pairs[name] = pair
            let key = Key(name: name, team: Self.teams[index % 2])
            keys.append(key)
            reads.append(Self.readRules.randomElement(using: &random)!)
            writes.append(Self.writeRules.randomElement(using: &random)!)
            roles["r\(index)"] = [
                "base": "write",
                "entities": ["Note": ["read": .string(reads[index].text), "write": .string(writes[index].text)]],
            ]
            keyLines += "\(pair.publicKey) r\(index) \(name) team=\(key.team)\n"
        }
        let adminPair = try CurveKeyPair.generate()
        keyLines += "\(adminPair.publicKey) admin admin\n"
        let daemon = try Self.daemon(
            in: directory, server: server, keyLines: keyLines,
            policy: String(decoding: JSONWriter.encode(["roles": .object(roles)]), as: UTF8.self))
        defer { XCTAssertEqual(daemon.stop(), 0) }
        func connect(_ pair: CurveKeyPair, _ name: String) async throws -> DepotConnection {
            try await DepotConnection.connect(
                to: daemon.endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(10),
                keys: try ClientKeys(serverKey: server.publicKey, secretKey: pair.secretKey))
        }
        let admin = try await connect(adminPair, "admin")
        var connections: [DepotConnection] = []
        for name in Self.names { connections.append(try await connect(pairs[name]!, name)) }
        defer { ([admin] + connections).forEach { $0.abort() } }

        let request = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")])
        func everything() async throws -> [JSONValue] {
            try await admin.call(StoreFetch.self, request).objects ?? []
        }
        func visible(_ index: Int, in all: [JSONValue]) -> [JSONValue] {
            all.filter { reads[index].holds($0, keys[index]) }
        }
        var collectors: [ChangeCollector] = []
        var mirrors: [ResultsMirror] = []
        var observers: [String] = []
        for connection in connections {
            collectors.append(ChangeCollector(connection))
            let result = try await connection.call(ResultsSubscribe.self, .init(request: request, include: .all))
            mirrors.append(ResultsMirror(result, request: request, sectionKeyPath: nil))
            observers.append(
                try await connection.call(StoreObserve.self, .init(entities: ["Note"], includeValues: true)).observer)
        }

        var all = try await everything()
        // How many inserted, updated and deleted ids the didSaves named, to show the walk reached each.
        var heard = [0, 0, 0]
        var counter = 0
        var refused = 0
        // Each key's didSaves in order, which its store/history must repeat transaction by transaction.
        var saves: [[TransactionRecord]] = Array(repeating: [], count: keys.count)
        for step in 0..<steps {
            let actor = Int.random(in: 0..<keys.count, using: &random)
            let key = keys[actor]
            let write = writes[actor]
            let params: StoreSave.Parameters
            let allowed: Bool
            let choice = all.isEmpty ? 0 : Int.random(in: 0..<3, using: &random)
            switch choice {
            case 0:
                counter += 1
                var values = Self.randomValues(&random)
                values["title"] = .string(String(format: "n%03d", counter))
                params = .init(inserted: [InsertedObject(entity: "Note", values: values)])
                allowed = write.holds(.object(values), key)
            case 1:
                let target = all.randomElement(using: &random)!
                var changed = Self.randomValues(&random)
                for name in changed.keys.shuffled(using: &random).prefix(Int.random(in: 0...3, using: &random)) {
                    changed[name] = nil
                }
                var after = target.objectValue ?? [:]
                for (name, value) in changed { after[name] = value }
                params = .init(updated: [UpdatedObject(id: target["id"]!.stringValue!, values: changed)])
                allowed = write.holds(target, key) && write.holds(.object(after), key)
            default:
                let target = all.randomElement(using: &random)!
                params = .init(deleted: [DeletedObject(id: target["id"]!.stringValue!)])
                allowed = write.holds(target, key)
            }
            let place =
                "seed \(seed) step \(step): \(key.name) (\(write.text)) \(["insert", "update", "delete"][choice])"
            let connection = connections[actor]
            if let error = try await Self.serverError({ _ = try await connection.call(StoreSave.self, params) }) {
                XCTAssertFalse(allowed, "\(place) was refused: \(error.message)")
                XCTAssertEqual(error.code, .forbidden, "\(place): \(error.message)")
                refused += 1
            } else {
                XCTAssertTrue(allowed, "\(place) committed outside the write scope")
            }
            let before = all
            all = try await everything()
            if !allowed { XCTAssertEqual(all, before, "\(place): a refused write changed the store") }
            // The one object the step touched: the inserted one, or the target.
            let ids = { (objects: [JSONValue]) in Set(objects.compactMap { $0["id"]?.stringValue }) }
            let touched: String? =
                switch (allowed, params.inserted.isEmpty) {
                case (false, _): nil
                case (true, false): ids(all).subtracting(ids(before)).first
                case (true, true): params.updated.first?.id ?? params.deleted.first?.id
                }
            for index in keys.indices {
                // What the key's didSave must say: judged on what it saw before and sees after.
                let (seenBefore, seenAfter) = (ids(visible(index, in: before)), ids(visible(index, in: all)))
                var expectedSave = EntityChanges()
                if let touched {
                    switch (seenBefore.contains(touched), seenAfter.contains(touched)) {
                    case (false, true): expectedSave.inserted = [touched]
                    case (true, false): expectedSave.deleted = [touched]
                    case (true, true):
                        // An update that sets the values an object has changes nothing: no didSave.
                        let object = { (objects: [JSONValue]) in objects.first { $0["id"]?.stringValue == touched } }
                        if object(before) != object(all) {
                            expectedSave.updated = [EntityChanges.Update(id: touched, keys: [])]
                        }
                    case (false, false): break
                    }
                }
                if !expectedSave.isEmpty {
                    let observer = observers[index]
                    let note = await collectors[index].take { $0.decode(DidSave.self)?.observer == observer }
                    let saved = try XCTUnwrap(
                        note?.decode(DidSave.self), "\(place): \(keys[index].name) got no store/didSave")
                    XCTAssertEqual(Array(saved.changes.keys), ["Note"], "\(place): \(keys[index].name)'s didSave")
                    let changes = saved.changes["Note"] ?? EntityChanges()
                    saves[index].append(
                        TransactionRecord(
                            transaction: saved.transaction, timestamp: "", author: saved.author,
                            changes: saved.changes))
                    heard[0] += changes.inserted.count
                    heard[1] += changes.updated.count
                    heard[2] += changes.deleted.count
                    XCTAssertEqual(changes.inserted, expectedSave.inserted, "\(place): \(keys[index].name)'s inserts")
                    XCTAssertEqual(changes.deleted, expectedSave.deleted, "\(place): \(keys[index].name)'s deletes")
                    XCTAssertEqual(
                        changes.updated.map(\.id), expectedSave.updated.map(\.id),
                        "\(place): \(keys[index].name)'s updates")
                    for (id, value) in saved.objects ?? [:] {
                        XCTAssertTrue(seenAfter.contains(id), "\(place): \(keys[index].name) got the values of \(id)")
                        XCTAssertTrue(reads[index].holds(value, keys[index]), "\(place): values outside the scope")
                    }
                }
                let expected = visible(index, in: all)
                let fetched = try await connections[index].call(StoreFetch.self, request).objects ?? []
                XCTAssertEqual(fetched, expected, "\(place): \(keys[index].name)'s fetch (\(reads[index].text))")
                let count = try await connections[index].call(StoreCount.self, request).count
                XCTAssertEqual(count, expected.count, "\(place): \(keys[index].name)'s count")
                guard visible(index, in: before) != expected else { continue }
                let change = try await collectors[index].expect(for: mirrors[index].subscription)
                for object in change.objects {
                    if let value = object.object {
                        XCTAssertTrue(reads[index].holds(value, keys[index]), "\(place): a delta outside the scope")
                    }
                }
                mirrors[index].apply(change)
                XCTAssertEqual(
                    mirrors[index].sections.first?.objects ?? [], expected,
                    "\(place): \(keys[index].name)'s subscription after the deltas")
            }
        }
        // No key got a notification its visible objects did not call for.
        try await Task.sleep(for: .milliseconds(300))
        for (index, collector) in collectors.enumerated() {
            let left = collector.drain()
            let extra = left.filter { $0.decode(ResultsDidChange.self) != nil }
            XCTAssertEqual(extra.count, 0, "seed \(seed): \(keys[index].name) got deltas that changed nothing it sees")
            let saves = left.compactMap { $0.decode(DidSave.self) }
            XCTAssertEqual(
                saves.count, 0, "seed \(seed): \(keys[index].name) got didSaves of nothing it sees: \(saves)")
        }
        // Each key's history from the start is what its observer heard, read in pages of three.
        for index in keys.indices {
            var history: [TransactionRecord] = []
            var since: Int64 = 0
            while true {
                let page = try await connections[index].call(StoreHistory.self, .init(since: since, limit: 3))
                XCTAssertLessThanOrEqual(page.transactions.count, 3)
                guard let last = page.transactions.last else { break }
                history += page.transactions
                since = last.transaction
            }
            let name = keys[index].name
            XCTAssertEqual(
                history.map(\.transaction), saves[index].map(\.transaction),
                "seed \(seed): \(name)'s history (\(reads[index].text)) has the transactions of its didSaves")
            for (entry, save) in zip(history, saves[index]) {
                XCTAssertEqual(entry.author, save.author, "seed \(seed): \(name)'s history \(entry.transaction)")
                XCTAssertEqual(entry.changes, save.changes, "seed \(seed): \(name)'s history \(entry.transaction)")
            }
        }
        XCTAssertTrue(heard.allSatisfy { $0 > 0 }, "seed \(seed): didSaves named inserts, updates, deletes: \(heard)")
        XCTAssertGreaterThan(refused, 0, "seed \(seed): the walk tried writes outside the scopes")
        XCTAssertLessThan(refused, steps, "seed \(seed): the walk committed writes")
    }
}
