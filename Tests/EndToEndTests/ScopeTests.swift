import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// Row-level scopes over a real daemon with a policy file (DESIGN.md §2): a
/// notes app where each member reads their own and the shared notes and writes
/// only their own, a team role scoped by a key attribute, a hidden entity.
final class ScopeTests: XCTestCase {
    var directory: URL!
    var server: CurveKeyPair!
    var clients: [String: CurveKeyPair] = [:]
    var daemon: Daemon!

    var keysFile: URL { directory.appendingPathComponent("authorized_keys") }
    var policyFile: URL { directory.appendingPathComponent("policy.json") }

    static let model = #"""
        {"entities": [
          {"name": "Folder", "attributes": [{"name": "name", "type": "string"}, {"name": "owner", "type": "string"}],
           "relationships": [{"name": "notes", "destination": "Note", "toMany": true, "inverse": "folder"}]},
          {"name": "Note", "attributes": [{"name": "title", "type": "string"}, {"name": "owner", "type": "string"},
             {"name": "team", "type": "string"}, {"name": "shared", "type": "boolean", "default": false},
             {"name": "rank", "type": "integer", "default": 0}],
           "relationships": [{"name": "folder", "destination": "Folder", "inverse": "notes"}],
           "uniquenessConstraints": [["title"]]},
          {"name": "Secret", "attributes": [{"name": "code", "type": "string"}]}
        ]}
        """#

    static let policy = #"""
        {"roles": {
          "member": {"base": "write", "entities": {
            "Note": {"read": "owner == $keyName OR shared == YES", "write": "owner == $keyName"},
            "Folder": {"read": "owner == $keyName", "write": "owner == $keyName"},
            "Secret": {"read": "FALSEPREDICATE", "write": "FALSEPREDICATE"}}},
          "teammate": {"base": "write", "entities": {
            "Note": {"read": "team == $team", "write": "team == $team AND owner == $keyName"}}}
        }}
        """#

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-scope-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        server = try CurveKeyPair.generate()
        for name in ["alice", "bob", "carol", "dana", "admin"] { clients[name] = try CurveKeyPair.generate() }
        try "\(server.secretKey)\n".write(
            to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        try Self.model.write(to: directory.appendingPathComponent("model.json"), atomically: true, encoding: .utf8)
        try Self.policy.write(to: policyFile, atomically: true, encoding: .utf8)
        try writeKeys([
            "alice": "member", "bob": "member", "carol": "teammate carol team=red", "dana": "teammate dana team=blue",
            "admin": "admin",
        ])
    }

    override func tearDownWithError() throws {
        if let daemon { XCTAssertEqual(daemon.stop(), 0) }
        daemon = nil
        try? FileManager.default.removeItem(at: directory)
    }

    /// Writes the key file: each value is `role [name] [attr=value ...]` (the name defaults to the key's).
    private func writeKeys(_ lines: [String: String]) throws {
        var text = ""
        for (name, rest) in lines.sorted(by: { $0.key < $1.key }) {
            let words = rest.split(separator: " ")
            text += "\(clients[name]!.publicKey) \(rest)\(words.count == 1 ? " \(name)" : "")\n"
        }
        try text.write(to: keysFile, atomically: true, encoding: .utf8)
    }

    private var arguments: [String] {
        [
            "--curve-secret-key", directory.appendingPathComponent("server.key").path,
            "--authorized-keys", keysFile.path, "--policy", policyFile.path,
            "--model", directory.appendingPathComponent("model.json").path,
        ]
    }

    private func startDaemon() throws {
        daemon = try Daemon(dataDirectory: directory.appendingPathComponent("data"), arguments: arguments)
    }

    private func connect(_ name: String) async throws -> DepotConnection {
        try await DepotConnection.connect(
            to: daemon.endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(10),
            keys: try ClientKeys(serverKey: server.publicKey, secretKey: clients[name]!.secretKey))
    }

    private func titles(_ client: DepotConnection, _ predicate: String? = nil) async throws -> [String] {
        let result = try await client.call(
            StoreFetch.self, FetchRequest(entity: "Note", predicate: predicate, sort: [SortDescriptor(key: "title")]))
        return (result.objects ?? []).compactMap { $0["title"]?.stringValue }
    }

    private func note(_ title: String, owner: String, shared: Bool = false, team: String = "red") -> InsertedObject {
        InsertedObject(
            entity: "Note", tempId: title,
            values: ["title": .string(title), "owner": .string(owner), "shared": .bool(shared), "team": .string(team)])
    }

    func testReadsWritesAndRefusalsFollowTheScope() async throws {
        try startDaemon()
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        let bob = try await connect("bob")
        defer { [admin, alice, bob].forEach { $0.abort() } }
        let ids = try await admin.call(
            StoreSave.self,
            .init(inserted: [
                note("a1", owner: "alice"), note("a2", owner: "alice", shared: true), note("b1", owner: "bob"),
                note("b2", owner: "bob", shared: true), note("c1", owner: "carol", team: "blue"),
                InsertedObject(entity: "Secret", values: ["code": "42"]),
                InsertedObject(entity: "Folder", tempId: "bf", values: ["name": "bob's", "owner": "bob"]),
            ])
        ).ids

        // Reading: only own and shared notes, whatever the request's predicate says.
        let aliceSees = try await titles(alice)
        XCTAssertEqual(aliceSees, ["a1", "a2", "b2"])
        let value1 = try await titles(alice, "TRUEPREDICATE OR owner == 'bob'")
        XCTAssertEqual(value1, ["a1", "a2", "b2"])
        await assertServerError(.predicateSyntax) {
            try await self.titles(alice, "owner == 'x') OR (1 == 1")
        }
        let value2 = try await titles(bob)
        XCTAssertEqual(value2, ["a2", "b1", "b2"])
        let value3 = try await alice.call(StoreCount.self, FetchRequest(entity: "Note")).count
        XCTAssertEqual(value3, 3, "count is scoped")
        let got = try await alice.call(StoreGet.self, .init(ids: [ids["b1"]!, ids["b2"]!])).objects
        XCTAssertEqual(got.first, .null, "an object outside the scope does not exist for the key")
        XCTAssertEqual(got.last?["title"], "b2")
        let grouped = try await alice.call(
            StoreFetch.self,
            FetchRequest(
                entity: "Note", sort: [SortDescriptor(key: "owner")], groupBy: ["owner"],
                aggregates: [ExpressionDescription(name: "n", function: .count)]))
        XCTAssertEqual(
            grouped.objects?.map { [$0["owner"] ?? .null, $0["n"] ?? .null] }, [["alice", 2], ["bob", 1]])
        // Hidden entities leave model/get; paths into scoped entities are refused.
        let entities = try await alice.call(ModelGet.self, .init()).entities.map(\.name)
        XCTAssertEqual(entities.sorted(), ["Folder", "Note"])
        let value4 = try await admin.call(ModelGet.self, .init()).entities.count
        XCTAssertEqual(value4, 3)
        let probe = await assertServerError(.forbidden) {
            try await self.titles(alice, "folder.name == \"bob's\"")
        }
        XCTAssertEqual(probe?.data?["field"], "params.predicate")
        await assertServerError(.forbidden) {
            try await alice.call(
                StoreFetch.self, FetchRequest(entity: "Note", sort: [SortDescriptor(key: "folder.name")]))
        }
        await assertServerError(.forbidden) {
            try await alice.call(StoreFetch.self, FetchRequest(entity: "Folder", predicate: "notes.@count > 0"))
        }
        await assertServerError(.forbidden) {
            try await alice.call(
                StoreFetch.self,
                FetchRequest(entity: "Folder", predicate: "SUBQUERY(notes, $n, $n.title == 'b1').@count > 0"))
        }
        let value5 = try await alice.call(StoreFetch.self, FetchRequest(entity: "Secret")).objects
        XCTAssertEqual(value5, [])
        await assertServerError(.forbidden) { try await alice.call(StoreObserve.self, .init()) }
        await assertServerError(.forbidden) { try await alice.call(StoreHistory.self, .init(since: 0)) }

        // Writing: outside the write scope is -32018 naming entity, object and rule; nothing commits.
        let before = try await titles(admin)
        let insert = await assertServerError(.forbidden) {
            try await alice.call(
                StoreSave.self, .init(inserted: [self.note("mine", owner: "alice"), self.note("x", owner: "bob")]))
        }
        XCTAssertEqual(insert?.data?["entity"], "Note")
        XCTAssertEqual(insert?.data?["rule"], "owner == $keyName")
        XCTAssertNotNil(insert?.data?["object"]?.stringValue)
        let update = await assertServerError(.forbidden) {
            try await alice.call(StoreSave.self, .init(updated: [UpdatedObject(id: ids["b2"]!, values: ["rank": 1])]))
        }
        XCTAssertEqual(update?.data?["object"]?.stringValue, ids["b2"])
        await assertServerError(.forbidden) {
            // Giving one's own note away breaks the rule after the update.
            try await alice.call(
                StoreSave.self, .init(updated: [UpdatedObject(id: ids["a1"]!, values: ["owner": "bob"])]))
        }
        await assertServerError(.forbidden) {
            try await alice.call(StoreSave.self, .init(deleted: [DeletedObject(id: ids["b1"]!)]))
        }
        await assertServerError(.forbidden) {
            // A uniqueness merge into bob's note is refused.
            try await alice.call(
                StoreSave.self, .init(inserted: [self.note("b1", owner: "alice")], mergePolicy: .objectTrump))
        }
        let after = try await titles(admin)
        XCTAssertEqual(after, before, "no refused write left anything behind")
        let value6 = try await admin.call(StoreCount.self, FetchRequest(entity: "Note")).count
        XCTAssertEqual(value6, 5)
        // Batches touch only the write scope.
        let updated = try await alice.call(
            BatchUpdate.self, .init(entity: "Note", predicate: "TRUEPREDICATE", values: ["rank": 7]))
        XCTAssertEqual(updated.count, 2)
        let ranks = try await admin.call(
            StoreFetch.self, FetchRequest(entity: "Note", predicate: "rank == 7", sort: [SortDescriptor(key: "title")])
        ).objects?.compactMap { $0["title"]?.stringValue }
        XCTAssertEqual(ranks, ["a1", "a2"])
        let batch = await assertServerError(.forbidden) {
            try await alice.call(
                BatchInsert.self,
                .init(
                    entity: "Note",
                    objects: [
                        ["title": "z", "owner": "alice", "team": "red"],
                        ["title": "z2", "owner": "bob", "team": "red"],
                    ]))
        }
        XCTAssertEqual(batch?.data?["rule"], "owner == $keyName")
        await assertServerError(.forbidden) {
            // Find-or-create landing on bob's note.
            try await alice.call(
                BatchInsert.self,
                .init(entity: "Note", objects: [["title": "b1", "owner": "alice", "team": "red"]], onConflict: .update))
        }
        let deleted = try await alice.call(BatchDelete.self, .init(entity: "Note", predicate: nil))
        XCTAssertEqual(deleted.count, 2)
        let value7 = try await titles(admin)
        XCTAssertEqual(value7, ["b1", "b2", "c1"])
        // Allowed writes commit as usual.
        _ = try await alice.call(StoreSave.self, .init(inserted: [note("a3", owner: "alice")]))
        let value8 = try await titles(alice)
        XCTAssertEqual(value8, ["a3", "b2"])
        _ = try await alice.call(
            BatchInsert.self, .init(entity: "Note", objects: [["title": "a4", "owner": "alice", "team": "blue"]]))
        let afterBatch = try await titles(alice)
        XCTAssertEqual(afterBatch, ["a3", "a4", "b2"])
        // Attributes bind too: carol (team red) sees the red notes.
        let carol = try await connect("carol")
        defer { carol.abort() }
        let value9 = try await titles(carol)
        XCTAssertEqual(value9, ["a3", "b1", "b2"])

        // server/stats shows each session's key, role and scope.
        let stats = try await admin.call(ServerStats.self, .init())
        let carolSession = stats.sessions.first { $0.key == "carol" }
        XCTAssertEqual(carolSession?.role, "teammate")
        XCTAssertEqual(carolSession?.scope?["Note"]?["read"], "team == $team")
        XCTAssertNil(stats.sessions.first { $0.key == "admin" }?.scope)
    }

    func testSubscriptionsFollowTheScopeAndSIGHUPReScopes() async throws {
        try startDaemon()
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        let bob = try await connect("bob")
        defer { [admin, alice, bob].forEach { $0.abort() } }
        let request = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")])
        let collector = ChangeCollector(alice)
        let result = try await alice.call(ResultsSubscribe.self, .init(request: request, include: .all))
        var mirror = ResultsMirror(result, request: request, sectionKeyPath: nil)
        // Bob shares a note: an insert for alice; unshares it: a delete; his private ones: nothing.
        let ids = try await bob.call(StoreSave.self, .init(inserted: [note("b1", owner: "bob", shared: true)])).ids
        var change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(change.objects.map(\.type), [.insert])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(alice)
        _ = try await bob.call(StoreSave.self, .init(inserted: [note("b2", owner: "bob")]))
        _ = try await bob.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["b1"]!, values: ["shared": false])]))
        change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(change.objects.map(\.type), [.delete], "b2 never reached alice; b1 left her scope")
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(alice)
        XCTAssertEqual(mirror.sections.first?.objects.count ?? 0, 0)

        // Two members with the same request hold two sets (their scopes differ), one each.
        _ = try await bob.call(ResultsSubscribe.self, .init(request: request, include: .all))
        let sets = try await admin.call(ServerStats.self, .init()).subscriptions
        XCTAssertEqual(sets.count, 2)

        // SIGHUP: a narrower policy re-scopes alice's session; a bad file keeps the policy in force.
        try Self.policy.replacingOccurrences(of: "owner == $keyName OR shared == YES", with: "owner == $keyName")
            .write(to: policyFile, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        let invalidated = await collector.take(timeout: .seconds(10)) {
            $0.decode(ResultsDidInvalidate.self)?.subscription == mirror.subscription
        }
        XCTAssertEqual(invalidated?.decode(ResultsDidInvalidate.self)?.reason, "scope")
        _ = try await bob.call(StoreSave.self, .init(inserted: [note("b3", owner: "bob", shared: true)]))
        let value10 = try await titles(alice)
        XCTAssertEqual(value10, [], "shared notes are no longer in alice's scope")
        try "{\"roles\": {\"member\": {\"base\": \"write\", \"entities\": {\"Note\": {\"read\": \"owner ==\"}}}}}"
            .write(to: policyFile, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        try await Task.sleep(for: .milliseconds(500))
        let value11 = try await titles(alice)
        XCTAssertEqual(value11, [], "the bad file changed nothing")
        let value12 = try await titles(bob)
        XCTAssertEqual(value12, ["b1", "b2", "b3"])
    }

    /// A live grouped result counts only what the key may read: a note outside
    /// the scope changes no group, one entering it updates its owner's group.
    func testLiveGroupsCountOnlyTheScope() async throws {
        try startDaemon()
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        let bob = try await connect("bob")
        defer { [admin, alice, bob].forEach { $0.abort() } }
        let ids = try await admin.call(
            StoreSave.self,
            .init(inserted: [
                note("a1", owner: "alice"), note("b1", owner: "bob", shared: true), note("b2", owner: "bob"),
            ])
        ).ids
        let request = FetchRequest(
            entity: "Note", sort: [SortDescriptor(key: "owner")], groupBy: ["owner"],
            aggregates: [ExpressionDescription(name: "n", function: .count)])
        let collector = ChangeCollector(alice)
        let result = try await alice.call(ResultsSubscribe.self, .init(request: request, include: .all))
        XCTAssertEqual(result.objects.map { [$0["owner"] ?? .null, $0["n"] ?? .null] }, [["alice", 1], ["bob", 1]])
        // A private note of bob's: outside alice's scope, no group changes.
        _ = try await bob.call(StoreSave.self, .init(inserted: [note("b3", owner: "bob")]))
        let quiet = await collector.next(for: result.subscription, timeout: .seconds(1))
        XCTAssertNil(quiet, "a note outside the scope changed a group: \(String(describing: quiet))")
        // Bob shares b2: it enters alice's scope, and bob's group counts it.
        _ = try await bob.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["b2"]!, values: ["shared": true])]))
        let change = try await collector.expect(for: result.subscription)
        XCTAssertEqual(change.objects.map(\.type), [.update])
        XCTAssertEqual(change.objects.first?.object?["n"], 2)
        let fresh = try await alice.call(StoreFetch.self, request).objects ?? []
        XCTAssertEqual(fresh.map { [$0["owner"] ?? .null, $0["n"] ?? .null] }, [["alice", 1], ["bob", 2]])
    }

    func testABadPolicyStopsTheDaemonBeforeAnythingIsBound() throws {
        for (policy, expected) in [
            ("{\"roles\": {\"member\": {\"base\": \"root\"}}}", "base"),
            (
                "{\"roles\": {\"member\": {\"base\": \"read\", \"entities\": {\"Note\": {\"read\": \"owner == \"}}}}}",
                "Note.read"
            ),
            (
                "{\"roles\": {\"member\": {\"base\": \"read\", \"entities\": {\"Note\": {\"read\": \"owner == $desk\"}}}}}",
                "desk"
            ),
            (
                "{\"roles\": {\"member\": {\"base\": \"read\", \"entities\": {\"Note\": {\"read\": \"colour == 'red'\"}}}}}",
                "colour"
            ),
            ("not json", "not JSON"),
        ] {
            try policy.write(to: policyFile, atomically: true, encoding: .utf8)
            let outcome = try ProcessOutcome.run(
                Executables.depotd,
                ["--data-dir", directory.appendingPathComponent("bad").path, "--listen", "tcp://127.0.0.1:0"]
                    + arguments)
            XCTAssertNotEqual(outcome.status, 0, policy)
            XCTAssertTrue(outcome.errors.contains(expected), "\(policy): \(outcome.errors)")
            XCTAssertFalse(outcome.output.contains("listening"), outcome.output)
        }
    }
}
