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

    /// Starts the daemon with the policy plus a read-only `role` whose read rules are `reading`
    /// (by entity), and the key file `keys` (as ``writeKeys(_:)`` takes it).
    private func startDaemon(role: String, reading: [String: String], keys: [String: String]) throws {
        let entities = JSONValue.object(reading.mapValues { .object(["read": .string($0)]) })
        let added = String(
            decoding: JSONWriter.encode(.object(["base": "read", "entities": entities])), as: UTF8.self)
        try Self.policy.replacingOccurrences(of: #""teammate": {"#, with: "\"\(role)\": \(added), \"teammate\": {")
            .write(to: policyFile, atomically: true, encoding: .utf8)
        try writeKeys(keys)
        try startDaemon()
    }

    private func connect(_ name: String, to other: Daemon? = nil) async throws -> DepotConnection {
        try await DepotConnection.connect(
            to: (other ?? daemon).endpoint, clientInfo: ImplementationInfo(name: name, version: "1"),
            timeout: .seconds(10),
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
        // Secret (read FALSEPREDICATE) does not exist for her: the unknown-entity -32602, without its name listed.
        let hidden = await assertServerError(.invalidParams) {
            try await alice.call(StoreFetch.self, FetchRequest(entity: "Secret"))
        }
        XCTAssertEqual(hidden?.message, "unknown entity 'Secret' (the model has: Folder, Note)")
        let hiddenCount = await assertServerError(.invalidParams) {
            try await alice.call(StoreCount.self, FetchRequest(entity: "Secret"))
        }
        XCTAssertEqual(hiddenCount?.message, hidden?.message)
        // History: the one transaction, with only the notes she can see (no folder of bob's, no secret).
        let history = try await alice.call(StoreHistory.self, .init(since: 0))
        XCTAssertEqual(
            history.transactions.map(\.changes),
            [["Note": EntityChanges(inserted: [ids["a1"]!, ids["a2"]!, ids["b2"]!])]])

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
        // Filing her note into bob's folder changes the folder (its notes): Folder's write rule refuses it.
        let filing = await assertServerError(.forbidden) {
            try await alice.call(
                StoreSave.self,
                .init(updated: [UpdatedObject(id: ids["a1"]!, values: ["folder": .string(ids["bf"]!)])]))
        }
        XCTAssertEqual(filing?.data?["entity"], "Folder")
        XCTAssertEqual(filing?.data?["object"]?.stringValue, ids["bf"])
        XCTAssertEqual(filing?.data?["rule"], "owner == $keyName")
        let folder = try await admin.call(StoreGet.self, .init(ids: [ids["a1"]!])).objects.first?["folder"]
        XCTAssertEqual(folder, .null, "nothing of the refused filing committed")
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
        let observer = try await alice.call(StoreObserve.self, .init()).observer
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
        let b3 = try await bob.call(StoreSave.self, .init(inserted: [note("b3", owner: "bob", shared: true)])).ids["b3"]
        let value10 = try await titles(alice)
        XCTAssertEqual(value10, [], "shared notes are no longer in alice's scope")
        // Her observer follows the new scope too: b3 is not hers.
        let heard = await collector.take(timeout: .milliseconds(500)) {
            $0.decode(DidSave.self).map { $0.observer == observer && $0.changes["Note"]?.inserted == [b3!] } ?? false
        }
        XCTAssertNil(heard, "alice's observer heard of b3 after the reload narrowed her scope")
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

    /// `store/observe` of a scoped key: only in-scope ids; an object updated out
    /// of the scope or deleted is a delete for the observer that saw it, one
    /// updated into it an insert; nothing when nothing in scope changed.
    func testObserversHearOnlyOfTheirScope() async throws {
        try startDaemon()
        let alice = try await connect("alice")
        let bob = try await connect("bob")
        // A second session of alice's key: the same rule, checked once per transaction for both.
        let alice2 = try await connect("alice")
        defer { [alice, bob, alice2].forEach { $0.abort() } }
        let collector = ChangeCollector(alice)
        let collector2 = ChangeCollector(alice2)
        let observer = try await alice.call(StoreObserve.self, .init(includeValues: true)).observer
        let observer2 = try await alice2.call(StoreObserve.self, .init(entities: ["Note"])).observer
        func nextSave() async -> DidSave.Parameters? {
            await collector.take(timeout: .seconds(10)) { $0.decode(DidSave.self)?.observer == observer }?.decode(
                DidSave.self)
        }
        // Bob's private note and a secret: nothing for alice (the next didSave is the shared note's).
        let ids = try await bob.call(StoreSave.self, .init(inserted: [note("b1", owner: "bob")])).ids
        _ = try await bob.call(StoreSave.self, .init(inserted: [note("b2", owner: "bob", shared: true)]))
        var saved = await nextSave()
        XCTAssertEqual(saved?.changes.keys.sorted(), ["Note"])
        let shared = try XCTUnwrap(saved?.changes["Note"]?.inserted.first)
        XCTAssertEqual(saved?.changes["Note"]?.inserted, [shared], "b1 is bob's private note")
        XCTAssertEqual(saved?.objects?.keys.sorted(), [shared])
        // b1 shared: it enters her scope (an insert); unshared: it leaves it (a delete).
        let b1 = ids["b1"]!
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["shared": true])]))
        saved = await nextSave()
        XCTAssertEqual(saved?.changes["Note"], EntityChanges(inserted: [b1]))
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["rank": 2])]))
        saved = await nextSave()
        XCTAssertEqual(saved?.changes["Note"]?.updated.map(\.id), [b1])
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["shared": false])]))
        saved = await nextSave()
        XCTAssertEqual(saved?.changes["Note"], EntityChanges(deleted: [b1]))
        XCTAssertNil(saved?.objects?[b1], "no values of an object outside the scope")
        // Out of scope, changed and deleted: nothing. The shared one deleted: a delete.
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["rank": 3])]))
        _ = try await bob.call(StoreSave.self, .init(deleted: [DeletedObject(id: b1)]))
        _ = try await bob.call(StoreSave.self, .init(deleted: [DeletedObject(id: shared)]))
        saved = await nextSave()
        XCTAssertEqual(saved?.changes["Note"], EntityChanges(deleted: [shared]))
        // alice's other session heard the same five: shared, b1 in, b1 changed, b1 out, shared deleted.
        var second: [EntityChanges] = []
        while second.count < 5,
            let note = await collector2.take(timeout: .seconds(10), where: { $0.decode(DidSave.self) != nil })
        {
            let params = note.decode(DidSave.self)
            XCTAssertEqual(params?.observer, observer2)
            second.append(params?.changes["Note"] ?? EntityChanges())
        }
        XCTAssertEqual(
            second.map { $0.inserted + $0.updated.map(\.id) + $0.deleted }, [[shared], [b1], [b1], [b1], [shared]])
        let late = await collector.take(timeout: .milliseconds(300)) { $0.decode(DidSave.self) != nil }
        XCTAssertNil(late, "a didSave of nothing alice sees")
        // Her history says what her observer heard, judged on the values recorded with each transaction.
        let history = try await alice.call(StoreHistory.self, .init(since: 0))
        XCTAssertEqual(history.transactions.map { $0.changes.keys.sorted() }, Array(repeating: ["Note"], count: 5))
        XCTAssertEqual(
            history.transactions.map { $0.changes["Note"].map { $0.inserted + $0.updated.map(\.id) + $0.deleted } },
            [[shared], [b1], [b1], [b1], [shared]])
        XCTAssertEqual(history.transactions.last?.changes["Note"], EntityChanges(deleted: [shared]))
    }

    /// Observers filed by the value their rule pins (Folder: `owner == $keyName`):
    /// a folder moving from bob to alice reaches both, a delete for bob and an
    /// insert for alice; later changes reach only alice's.
    func testObserversFiledByValueHearRowsLeavingTheirValue() async throws {
        try startDaemon()
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        let bob = try await connect("bob")
        defer { [admin, alice, bob].forEach { $0.abort() } }
        let aliceCollector = ChangeCollector(alice)
        let bobCollector = ChangeCollector(bob)
        let aliceObserver = try await alice.call(StoreObserve.self, .init(entities: ["Folder"])).observer
        let bobObserver = try await bob.call(StoreObserve.self, .init(entities: ["Folder"])).observer
        func next(_ collector: ChangeCollector, _ observer: String) async -> EntityChanges? {
            await collector.take(timeout: .seconds(10)) { $0.decode(DidSave.self)?.observer == observer }?.decode(
                DidSave.self)?.changes["Folder"]
        }
        let folder = try await admin.call(
            StoreSave.self,
            .init(inserted: [InsertedObject(entity: "Folder", tempId: "f", values: ["name": "f", "owner": "bob"])])
        ).ids["f"]!
        let inserted = await next(bobCollector, bobObserver)
        XCTAssertEqual(inserted, EntityChanges(inserted: [folder]))
        _ = try await admin.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: folder, values: ["owner": "alice"])]))
        let left = await next(bobCollector, bobObserver)
        XCTAssertEqual(left, EntityChanges(deleted: [folder]), "the folder left bob's value")
        let entered = await next(aliceCollector, aliceObserver)
        XCTAssertEqual(entered, EntityChanges(inserted: [folder]), "and entered alice's")
        _ = try await admin.call(StoreSave.self, .init(updated: [UpdatedObject(id: folder, values: ["name": "g"])]))
        _ = try await admin.call(StoreSave.self, .init(deleted: [DeletedObject(id: folder)]))
        let renamed = await next(aliceCollector, aliceObserver)
        XCTAssertEqual(renamed?.updated.map(\.id), [folder])
        let deleted = await next(aliceCollector, aliceObserver)
        XCTAssertEqual(deleted, EntityChanges(deleted: [folder]))
        let late = await bobCollector.take(timeout: .milliseconds(300)) { $0.decode(DidSave.self) != nil }
        XCTAssertNil(late, "bob heard of a folder no longer his")
        XCTAssertNil(aliceCollector.drain().first { $0.decode(DidSave.self) != nil }, "alice heard more")
    }

    /// A scoped observer whose rule reads through a relationship (so is checked
    /// with SQL, not in memory): a note filed into the key's folder is an
    /// insert, moved out of it a delete; notes elsewhere send nothing.
    func testAnObserverWhoseRuleFollowsARelationship() async throws {
        try startDaemon(
            role: "filer", reading: ["Note": "folder.owner == $keyName"],
            keys: ["dana": "filer dana", "admin": "admin"])
        let admin = try await connect("admin")
        let dana = try await connect("dana")
        defer { [admin, dana].forEach { $0.abort() } }
        let collector = ChangeCollector(dana)
        let observer = try await dana.call(StoreObserve.self, .init(entities: ["Note"])).observer
        func nextSave() async -> EntityChanges? {
            await collector.take(timeout: .seconds(10)) { $0.decode(DidSave.self)?.observer == observer }?.decode(
                DidSave.self)?.changes["Note"]
        }
        let folders = try await admin.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Folder", tempId: "hers", values: ["name": "hers", "owner": "dana"]),
                InsertedObject(entity: "Folder", tempId: "other", values: ["name": "other", "owner": "bob"]),
            ])
        ).ids
        var elsewhere = note("elsewhere", owner: "bob")
        elsewhere.values["folder"] = .string(folders["other"]!)
        var filed = note("filed", owner: "bob")
        filed.values["folder"] = .string(folders["hers"]!)
        let ids = try await admin.call(StoreSave.self, .init(inserted: [elsewhere, filed])).ids
        let first = await nextSave()
        XCTAssertEqual(first, EntityChanges(inserted: [ids["filed"]!]), "only the note in her folder")
        _ = try await admin.call(
            StoreSave.self,
            .init(updated: [UpdatedObject(id: ids["filed"]!, values: ["folder": .string(folders["other"]!)])]))
        let moved = await nextSave()
        XCTAssertEqual(moved, EntityChanges(deleted: [ids["filed"]!]), "moved out of her folder")
        _ = try await admin.call(StoreSave.self, .init(deleted: [DeletedObject(id: ids["elsewhere"]!)]))
        let late = await collector.take(timeout: .milliseconds(300)) { $0.decode(DidSave.self) != nil }
        XCTAssertNil(late, "a delete of a note she never saw")
        // History records an object's own keys only: a rule through a relationship cannot be judged there.
        let refused = await assertServerError(.forbidden) { try await dana.call(StoreHistory.self, .init(since: 0)) }
        XCTAssertEqual(refused?.data?["rule"], "folder.owner == $keyName")
        XCTAssertEqual(refused?.data?["entity"], "Note")
    }

    /// In a PostgreSQL cluster the recorded values travel with each history
    /// entry: a scoped key's history is the same on the daemon that committed
    /// the saves and on one that applied them from the log.
    func testScopedHistoryIsTheSameOnEveryDaemonOfACluster() async throws {
        guard let url = ProcessInfo.processInfo.environment["DEPOT_TEST_STORE"], !url.isEmpty else {
            throw XCTSkip("needs PostgreSQL (DEPOT_TEST_STORE, as make test-postgres sets)")
        }
        let store = "\(url)?schema=scopes_\(UUID().uuidString.prefix(8).lowercased())"
        daemon = try Daemon(
            dataDirectory: directory.appendingPathComponent("one"), arguments: arguments + ["--store", store])
        let other = try Daemon(
            dataDirectory: directory.appendingPathComponent("two"), arguments: arguments + ["--store", store])
        defer { XCTAssertEqual(other.stop(), 0) }
        let bob = try await connect("bob")
        let alice = try await connect("alice")
        let aliceThere = try await connect("alice", to: other)
        defer { [bob, alice, aliceThere].forEach { $0.abort() } }
        let ids = try await bob.call(
            StoreSave.self, .init(inserted: [note("c1", owner: "bob", shared: true), note("c2", owner: "bob")])
        ).ids
        _ = try await bob.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["c1"]!, values: ["shared": false])]))
        let last = try await bob.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["c2"]!, values: ["shared": true])])
        ).transaction
        let here = try await alice.call(StoreHistory.self, .init(since: 0))
        var there = try await aliceThere.call(StoreHistory.self, .init(since: 0))
        for _ in 0..<200 where there.latest < last {
            try await Task.sleep(for: .milliseconds(50))
            there = try await aliceThere.call(StoreHistory.self, .init(since: 0))
        }
        XCTAssertEqual(
            here.transactions.map(\.changes),
            [
                ["Note": EntityChanges(inserted: [ids["c1"]!])], ["Note": EntityChanges(deleted: [ids["c1"]!])],
                ["Note": EntityChanges(inserted: [ids["c2"]!])],
            ])
        XCTAssertEqual(there.transactions.map(\.transaction), here.transactions.map(\.transaction))
        XCTAssertEqual(there.transactions.map(\.changes), here.transactions.map(\.changes))
    }

    /// A SIGHUP whose policy reads a key no rule read before: history recorded
    /// before it lacks that key's values, so the range before the reload is
    /// refused (-32602 naming `since` and where to start), and what follows is
    /// judged exactly, as the observer heard it.
    func testHistoryBeforeAPolicyThatReadsNewKeysIsRefused() async throws {
        try startDaemon()
        let alice = try await connect("alice")
        let bob = try await connect("bob")
        defer { [alice, bob].forEach { $0.abort() } }
        let ids = try await bob.call(StoreSave.self, .init(inserted: [note("b1", owner: "bob")])).ids
        let b1 = ids["b1"]!
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["rank": 3])]))
        let plain = try await alice.call(StoreHistory.self, .init(since: 0))
        XCTAssertEqual(plain.transactions.count, 0, "b1 is bob's private note")
        try Self.policy.replacingOccurrences(
            of: "owner == $keyName OR shared == YES", with: "owner == $keyName OR rank >= 2"
        ).write(to: policyFile, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        // The reload is in force once b1 (rank 3) is hers to read.
        var value = try await titles(alice)
        for _ in 0..<100 where value != ["b1"] {
            try await Task.sleep(for: .milliseconds(50))
            value = try await titles(alice)
        }
        XCTAssertEqual(value, ["b1"])
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["rank": 1])]))
        _ = try await bob.call(StoreSave.self, .init(updated: [UpdatedObject(id: b1, values: ["rank": 2])]))
        let refused = await assertServerError(.invalidParams) {
            try await alice.call(StoreHistory.self, .init(since: 0))
        }
        XCTAssertEqual(refused?.data?["field"], "since")
        XCTAssertEqual(refused?.data?["since"], 2, "the transactions before the reload were recorded without rank")
        let after = try await alice.call(StoreHistory.self, .init(since: 2))
        XCTAssertEqual(
            after.transactions.map(\.changes),
            [["Note": EntityChanges(deleted: [b1])], ["Note": EntityChanges(inserted: [b1])]])
    }

    /// A scope that cannot be evaluated for one subscriber (a runaway `MATCHES`
    /// on its key's attribute, stopped by the time limit on one match) invalidates
    /// that subscription alone, and ends that key's observer (its client gets
    /// `store/observeDidEnd`); every other subscriber and observer goes on.
    func testAScopeThatFailsInvalidatesOnlyItsSubscriber() async throws {
        try startDaemon(
            role: "matcher", reading: ["Note": "title MATCHES $pattern"],
            keys: ["alice": "member", "bob": "member", "dana": "matcher dana pattern=(a+)+b", "admin": "admin"])
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        let dana = try await connect("dana")
        defer { [admin, alice, dana].forEach { $0.abort() } }
        let request = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")])
        let aliceCollector = ChangeCollector(alice)
        let danaCollector = ChangeCollector(dana)
        var aliceMirror = ResultsMirror(
            try await alice.call(ResultsSubscribe.self, .init(request: request, include: .all)), request: request,
            sectionKeyPath: nil)
        let danaSubscription = try await dana.call(ResultsSubscribe.self, .init(request: request, include: .all))
            .subscription
        let danaObserver = try await dana.call(StoreObserve.self, .init()).observer
        // Her object context merging saves hears it too: the change stream says merging ended.
        let context = ObjectContext(connection: dana)
        try await context.setAutomaticallyMergesChangesFromStore(true)
        let contextChanges = context.objectsDidChange()
        let contextEnded = Task { () -> String? in
            for await change in contextChanges where change.mergingEnded != nil { return change.mergingEnded }
            return nil
        }
        let aliceObserver = try await alice.call(StoreObserve.self, .init()).observer
        // Matching this title against (a+)+b backtracks for far longer than one match may take.
        let runaway = String(repeating: "a", count: 27) + "c"
        let saved = try await admin.call(StoreSave.self, .init(inserted: [note(runaway, owner: "alice")]))
        let invalidated = await danaCollector.take(timeout: .seconds(30)) {
            $0.decode(ResultsDidInvalidate.self)?.subscription == danaSubscription
        }
        XCTAssertEqual(invalidated?.decode(ResultsDidInvalidate.self)?.reason, "error")
        // Dana's client is told that her observer ended, and at which transaction.
        let ended = await danaCollector.take(timeout: .seconds(30)) {
            $0.decode(ObserveDidEnd.self)?.observer == danaObserver
        }?.decode(ObserveDidEnd.self)
        XCTAssertEqual(ended?.observer, danaObserver)
        XCTAssertEqual(ended?.reason, "error")
        XCTAssertEqual(ended?.transaction, saved.transaction)
        XCTAssertFalse(ended?.message.isEmpty ?? true)
        let timeout = Task {
            try await Task.sleep(for: .seconds(30))
            contextEnded.cancel()
        }
        let endedMerging = await contextEnded.value
        timeout.cancel()
        XCTAssertTrue(endedMerging?.contains("MATCHES") ?? false, "\(endedMerging ?? "no end")")
        XCTAssertFalse(context.automaticallyMergesChangesFromStore)
        let aliceSave = await aliceCollector.take(timeout: .seconds(10)) {
            $0.decode(DidSave.self)?.observer == aliceObserver
        }
        XCTAssertEqual(aliceSave?.decode(DidSave.self)?.transaction, saved.transaction, "alice's observer goes on")
        var change = try await aliceCollector.expect(for: aliceMirror.subscription)
        aliceMirror.apply(change)
        // Alice goes on getting her deltas; dana's observer is gone, not fed.
        _ = try await admin.call(StoreSave.self, .init(inserted: [note("later", owner: "alice")]))
        change = try await aliceCollector.expect(for: aliceMirror.subscription)
        aliceMirror.apply(change)
        try await aliceMirror.assertMatchesFreshFetch(alice)
        XCTAssertEqual(aliceMirror.sections.first?.objects.count, 2)
        let sessions = try await admin.call(ServerStats.self, .init()).sessions
        XCTAssertEqual(sessions.first { $0.client?.name == "dana" }?.observers, 0)
        XCTAssertNil(danaCollector.drain().first { $0.decode(DidSave.self) != nil }, "dana heard of a save")
        XCTAssertNil(
            aliceCollector.drain().first { $0.decode(ObserveDidEnd.self) != nil }, "alice's observer did not end")
        // It was the MATCHES time limit that stopped the scope, for dana's set and dana's observer.
        XCTAssertEqual(daemon.stop(), 0)
        let log = daemon.log
        daemon = nil
        XCTAssertTrue(log.contains("MATCHES stopped"), log)
        XCTAssertTrue(log.contains("of a scoped key is removed"), log)
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
