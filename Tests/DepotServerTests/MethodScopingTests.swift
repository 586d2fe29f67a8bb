import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// Scopes applied by construction (DESIGN.md §2), in memory: every registered
/// method declares how it treats the key's scope, every scoped one really
/// restricts, and an entity the key cannot read does not exist for it.
final class MethodScopingTests: XCTestCase {
    private var directory: URL!
    private var service: DepotService!
    private var outbox: RecordingOutbox!
    private var nextID = 100
    private var nextPeer: UInt8 = 20

    static let model = #"""
        {"entities": [
          {"name": "Note", "attributes": [{"name": "owner", "type": "string"}, {"name": "title", "type": "string"}],
           "relationships": [{"name": "secret", "destination": "Secret", "inverse": "notes", "optional": true}]},
          {"name": "Secret", "attributes": [{"name": "owner", "type": "string"}, {"name": "code", "type": "string"}],
           "relationships": [{"name": "notes", "destination": "Note", "inverse": "secret", "toMany": true}]}]}
        """#

    static let policy = #"""
        {"roles": {"member": {"base": "write", "entities": {
          "Note": {"read": "owner == $keyName", "write": "owner == $keyName"},
          "Secret": {"read": "FALSEPREDICATE", "write": "FALSEPREDICATE"}}}}}
        """#

    static let alice = CoreKeys.publicKey(1)
    static let bob = CoreKeys.publicKey(2)
    static let ops = CoreKeys.publicKey(3)

    static let keys = """
        \(alice) member alice
        \(bob) member bob
        \(ops) admin ops
        """

    /// What bob's rows and the hidden entity's rows hold: none of it may reach alice.
    static let leaks = ["bob-private", "hush"]

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-scoping-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        (service, outbox) = try makeCore(in: directory, model: Self.model, keys: Self.keys, policy: Self.policy)
        // Seeded by the unscoped peer of the harness (no key), as through ipc://.
        request(
            service, [9], id: 3, "store/save",
            #"""
            {"inserted": [
              {"entity": "Note", "values": {"owner": "alice", "title": "alice-1"}},
              {"entity": "Note", "values": {"owner": "alice", "title": "alice-2"}},
              {"entity": "Note", "values": {"owner": "bob", "title": "bob-private-1"}},
              {"entity": "Note", "values": {"owner": "bob", "title": "bob-private-2"}},
              {"entity": "Secret", "values": {"owner": "alice", "code": "hush"}}]}
            """#)
        XCTAssertNotNil(try outbox.response(3, of: [9])["result"])
    }

    override func tearDownWithError() throws {
        service?.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    // MARK: Helpers

    /// A new session of the client holding `key`.
    private func session(_ key: String) throws -> [UInt8] {
        nextPeer += 1
        let peer = [nextPeer]
        XCTAssertNotNil(try call(peer, key, "initialize", #"{"protocolVersion": "1"}"#)["result"])
        return peer
    }

    /// Sends `method` from `peer` as `key` and waits for its answer.
    @discardableResult
    private func call(_ peer: [UInt8], _ key: String, _ method: String, _ params: String) throws -> JSONValue {
        nextID += 1
        request(service, peer, key: key, id: nextID, method, params)
        return try outbox.response(nextID, of: peer)
    }

    /// Sends `method` from the harness's unscoped peer (no key) and waits for its answer.
    private func unscoped(_ method: String, _ params: String) throws -> JSONValue {
        nextID += 1
        request(service, [9], id: nextID, method, params)
        return try outbox.response(nextID, of: [9])
    }

    private func text(_ value: JSONValue) -> String { String(decoding: JSONWriter.encode(value), as: UTF8.self) }

    /// Everything `peer` received, as text.
    private func received(by peer: [UInt8]) -> String {
        outbox.received(by: peer).map(text).joined(separator: "\n")
    }

    private func assertNoLeak(to peer: [UInt8], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let text = received(by: peer)
        for leak in Self.leaks {
            XCTAssertFalse(text.contains(leak), "\(what): '\(leak)' reached alice: \(text)", file: file, line: line)
        }
    }

    /// The error of `answer`, asserting it is one.
    private func error(_ answer: JSONValue, file: StaticString = #filePath, line: UInt = #line) -> JSONValue? {
        XCTAssertNotNil(answer["error"], "expected an error, got \(answer)", file: file, line: line)
        return answer["error"]
    }

    /// `method` naming the hidden entity answers exactly as naming an unknown one, name for name,
    /// and the error never lists the hidden entity.
    private func assertHiddenIsUnknown(
        _ method: String, code: Int64 = -32602, _ params: (String) -> String, file: StaticString = #filePath,
        line: UInt = #line
    ) throws {
        let peer = try session(Self.alice)
        guard let hidden = error(try call(peer, Self.alice, method, params("Secret")), file: file, line: line),
            let unknown = error(try call(peer, Self.alice, method, params("Nope")), file: file, line: line)
        else { return }
        XCTAssertEqual(hidden["code"], .int(code), "\(method): \(hidden)", file: file, line: line)
        XCTAssertEqual(hidden["code"], unknown["code"], "\(method)", file: file, line: line)
        let hiddenText = String(decoding: JSONWriter.encode(hidden), as: UTF8.self)
        let unknownText = String(decoding: JSONWriter.encode(unknown), as: UTF8.self)
        XCTAssertEqual(
            hiddenText, unknownText.replacingOccurrences(of: "Nope", with: "Secret"), "\(method)", file: file,
            line: line)
        XCTAssertFalse(unknownText.contains("Secret"), "\(method) lists the hidden entity: \(unknownText)")
        assertNoLeak(to: peer, method, file: file, line: line)
    }

    /// A new session of alice subscribed to her notes by title, without objects: the peer and the subscription.
    private func subscribedSession() throws -> ([UInt8], String) {
        let peer = try session(Self.alice)
        let subscribed = try call(
            peer, Self.alice, ResultsSubscribe.name,
            #"{"request": {"entity": "Note", "sort": [{"key": "title"}]}, "include": "none"}"#)
        return (peer, subscribed["result"]?["subscription"]?.stringValue ?? "")
    }

    private func titles(_ objects: JSONValue?) -> [String] {
        (objects?.arrayValue ?? []).compactMap { $0["title"]?.stringValue }.sorted()
    }

    // MARK: The walk

    /// The probe of each ``Scoping/scoped`` method: it checks that the method restricts alice
    /// (owner scope on Note, Secret hidden) and treats Secret as unknown where it names an entity.
    private var probes: [String: () throws -> Void] {
        [
            ModelGet.name: { [self] in
                let peer = try session(Self.alice)
                let model = try call(peer, Self.alice, ModelGet.name, "{}")
                let names = (model["result"]?["entities"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }
                XCTAssertEqual(names, ["Note"])
                XCTAssertFalse(received(by: peer).contains("Secret"))
            },
            StoreFetch.name: { [self] in
                let peer = try session(Self.alice)
                let answer = try call(peer, Self.alice, StoreFetch.name, #"{"entity": "Note"}"#)
                XCTAssertEqual(titles(answer["result"]?["objects"]), ["alice-1", "alice-2"])
                // The predicate only narrows.
                let widened = try call(
                    peer, Self.alice, StoreFetch.name,
                    #"{"entity": "Note", "predicate": "TRUEPREDICATE OR owner == 'bob'"}"#)
                XCTAssertEqual(titles(widened["result"]?["objects"]), ["alice-1", "alice-2"])
                let grouped = try call(
                    peer, Self.alice, StoreFetch.name, #"{"entity": "Note", "groupBy": ["owner"]}"#)
                XCTAssertEqual(grouped["result"]?["objects"]?.arrayValue?.count, 1, "\(grouped)")
                assertNoLeak(to: peer, "store/fetch")
                try assertHiddenIsUnknown(StoreFetch.name) { #"{"entity": "\#($0)"}"# }
            },
            StoreCount.name: { [self] in
                let peer = try session(Self.alice)
                let answer = try call(peer, Self.alice, StoreCount.name, #"{"entity": "Note"}"#)
                XCTAssertEqual(answer["result"]?["count"], .int(2))
                try assertHiddenIsUnknown(StoreCount.name) { #"{"entity": "\#($0)"}"# }
            },
            StoreGet.name: { [self] in
                let peer = try session(Self.alice)
                let answer = try call(peer, Self.alice, StoreGet.name, #"{"ids": ["Note/1", "Note/3"]}"#)
                XCTAssertEqual(answer["result"]?["objects"]?.arrayValue?.last, .null, "\(answer)")
                XCTAssertEqual(answer["result"]?["objects"]?.arrayValue?.first?["title"], "alice-1")
                assertNoLeak(to: peer, "store/get")
                try assertHiddenIsUnknown(StoreGet.name) { #"{"ids": ["\#($0)/1"]}"# }
            },
            StoreSave.name: { [self] in
                let peer = try session(Self.alice)
                let foreign = try call(
                    peer, Self.alice, StoreSave.name,
                    #"{"inserted": [{"entity": "Note", "values": {"owner": "bob", "title": "x"}}]}"#)
                XCTAssertEqual(error(foreign)?["code"], .int(-32018))
                let update = try call(
                    peer, Self.alice, StoreSave.name, #"{"updated": [{"id": "Note/3", "values": {"title": "mine"}}]}"#)
                XCTAssertEqual(error(update)?["code"], .int(-32018))
                assertNoLeak(to: peer, "store/save")
                // A save reports an unknown entity as a validation problem (unknownEntity).
                try assertHiddenIsUnknown(StoreSave.name, code: Int64(ErrorCode.validationFailed.rawValue)) {
                    #"{"inserted": [{"entity": "\#($0)", "values": {"owner": "alice"}}]}"#
                }
            },
            StoreObserve.name: { [self] in
                let peer = try session(Self.alice)
                XCTAssertNotNil(
                    try call(peer, Self.alice, StoreObserve.name, #"{"entities": ["Note"], "includeValues": true}"#)[
                        "result"])
                let other = try session(Self.bob)
                XCTAssertNotNil(
                    try call(
                        other, Self.bob, StoreSave.name,
                        #"{"inserted": [{"entity": "Note", "values": {"owner": "bob", "title": "bob-private-3"}}]}"#)[
                            "result"])
                XCTAssertNotNil(
                    try call(
                        peer, Self.alice, StoreSave.name,
                        #"{"inserted": [{"entity": "Note", "values": {"owner": "alice", "title": "alice-3"}}]}"#)[
                            "result"])
                _ = try outbox.wait(for: peer) { messages in
                    messages.contains { $0["method"] == "store/didSave" && self.text($0).contains("alice-3") }
                }
                assertNoLeak(to: peer, "store/observe")
                try assertHiddenIsUnknown(StoreObserve.name) { #"{"entities": ["\#($0)"]}"# }
            },
            StoreHistory.name: { [self] in
                let peer = try session(Self.alice)
                let answer = try call(peer, Self.alice, StoreHistory.name, #"{"since": 0}"#)
                XCTAssertNotNil(answer["result"]?["transactions"], "\(answer)")
                let history = text(answer)
                XCTAssertTrue(history.contains("Note/1"), history)
                XCTAssertFalse(history.contains("Note/3"), history)
                XCTAssertFalse(history.contains("Secret"), history)
            },
            ResultsSubscribe.name: { [self] in
                let peer = try session(Self.alice)
                let answer = try call(
                    peer, Self.alice, ResultsSubscribe.name,
                    #"{"request": {"entity": "Note", "sort": [{"key": "title"}]}, "include": "all"}"#)
                XCTAssertEqual(titles(answer["result"]?["objects"]), ["alice-1", "alice-2"], "\(answer)")
                assertNoLeak(to: peer, "results/subscribe")
                try assertHiddenIsUnknown(ResultsSubscribe.name) {
                    #"{"request": {"entity": "\#($0)", "sort": [{"key": "owner"}]}}"#
                }
            },
            ResultsObjects.name: { [self] in
                let (peer, id) = try subscribedSession()
                let answer = try call(
                    peer, Self.alice, ResultsObjects.name, #"{"subscription": "\#(id)", "offset": 0, "length": 10}"#)
                XCTAssertEqual(titles(answer["result"]?["objects"]), ["alice-1", "alice-2"], "\(answer)")
                assertNoLeak(to: peer, "results/objects")
            },
            ResultsSnapshot.name: { [self] in
                let (peer, id) = try subscribedSession()
                let answer = try call(peer, Self.alice, ResultsSnapshot.name, #"{"subscription": "\#(id)"}"#)
                XCTAssertNotNil(answer["result"], "\(answer)")
                assertNoLeak(to: peer, "results/snapshot")
            },
            BatchInsert.name: { [self] in
                let peer = try session(Self.alice)
                let foreign = try call(
                    peer, Self.alice, BatchInsert.name,
                    #"{"entity": "Note", "objects": [{"owner": "bob", "title": "x"}]}"#)
                XCTAssertEqual(error(foreign)?["code"], .int(-32018))
                try assertHiddenIsUnknown(BatchInsert.name) { #"{"entity": "\#($0)", "objects": [{"owner": "a"}]}"# }
            },
            BatchUpdate.name: { [self] in
                let peer = try session(Self.alice)
                let answer = try call(
                    peer, Self.alice, BatchUpdate.name, #"{"entity": "Note", "values": {"title": "alice-x"}}"#)
                // Alice's three notes (two seeded, one saved by the observe probe), none of bob's.
                XCTAssertEqual(answer["result"]?["count"], .int(3), "\(answer)")
                let fetched = try unscoped(StoreFetch.name, #"{"entity": "Note", "predicate": "owner == 'bob'"}"#)
                let bobs = titles(fetched["result"]?["objects"])
                XCTAssertEqual(bobs.count, 3)
                XCTAssertTrue(bobs.allSatisfy { $0.hasPrefix("bob-private") }, "\(bobs)")
                try assertHiddenIsUnknown(BatchUpdate.name) { #"{"entity": "\#($0)", "values": {"code": "x"}}"# }
            },
            BatchDelete.name: { [self] in
                let peer = try session(Self.alice)
                try assertHiddenIsUnknown(BatchDelete.name) { #"{"entity": "\#($0)"}"# }
                let answer = try call(peer, Self.alice, BatchDelete.name, #"{"entity": "Note"}"#)
                XCTAssertEqual(answer["result"]?["count"], .int(3), "\(answer)")
                let left = try unscoped(StoreCount.name, #"{"entity": "Note"}"#)
                XCTAssertEqual(left["result"]?["count"], .int(3), "bob's notes stay: \(left)")
            },
        ]
    }

    /// The order the probes run in: reads first, then the writes, each expecting what the ones before left.
    static let probeOrder = [
        ModelGet.name, StoreFetch.name, StoreCount.name, StoreGet.name, StoreHistory.name, ResultsSubscribe.name,
        ResultsObjects.name, ResultsSnapshot.name, StoreSave.name, BatchInsert.name, StoreObserve.name,
        BatchUpdate.name, BatchDelete.name,
    ]

    /// Methods that read no rows, reviewed: a new ``Scoping/unscoped(reason:)`` method must be added here.
    static let unscoped: Set<String> = [
        Initialize.name, Ping.name, Disconnect.name, StoreUnobserve.name, ResultsUnsubscribe.name,
    ]

    func testEveryRegisteredMethodDeclaresItsScopingAndScopedOnesRestrict() throws {
        let probes = probes
        XCTAssertFalse(service.methodNames.isEmpty)
        var scoped: [String] = []
        for method in service.methodNames {
            guard let handler = service.handlers[method] else {
                XCTFail("\(method) is announced but has no handler")
                continue
            }
            switch handler.scoping {
            case .scoped:
                XCTAssertNotNil(
                    probes[method], "\(method) is scoped but MethodScopingTests has no probe for it: add one")
                XCTAssertTrue(Self.probeOrder.contains(method), "\(method): add it to MethodScopingTests.probeOrder")
                scoped.append(method)
            case .unscoped(let reason):
                XCTAssertFalse(reason.isEmpty, "\(method) declares no reason for reading without a scope")
                XCTAssertTrue(
                    Self.unscoped.contains(method),
                    "\(method) is declared unscoped (\(reason)): review it and list it in MethodScopingTests.unscoped")
            case .adminOnly(let reason):
                XCTAssertFalse(reason.isEmpty, "\(method) declares no reason")
                XCTAssertEqual(
                    Role.required(for: method), .admin, "\(method) is admin-only but a lesser role may call it")
                let peer = try session(Self.alice)
                XCTAssertEqual(error(try call(peer, Self.alice, method, "{}"))?["code"], .int(-32018), method)
            }
        }
        // Every probe is of a registered scoped method (none is stale).
        XCTAssertEqual(Set(probes.keys), Set(scoped))
        for method in Self.probeOrder where scoped.contains(method) { try probes[method]?() }
    }

    /// A handler's context holds no store (``RequestContext``): the whole store is reached only
    /// through ``StoreView/unscopedStore()``, which answers registrations that declared
    /// `.unscoped` or `.adminOnly` and refuses scoped ones, whatever the key.
    func testOnlyRegistrationsThatDeclareItReachTheUnscopedStore() throws {
        for method in service.methodNames {
            let scoping = try XCTUnwrap(service.handlers[method]).scoping
            for key in [nil, service.keys?.key(Self.alice)] as [AuthorizedKey?] {
                let view = StoreView(store: service.store, key: key, scoping: scoping)
                if scoping == .scoped {
                    XCTAssertThrowsError(try view.unscopedStore(), method) { error in
                        XCTAssertEqual((error as? RPCError)?.code, .internalError, method)
                    }
                } else {
                    XCTAssertNoThrow(try view.unscopedStore(), method)
                }
            }
        }
    }

    func testAnUnscopedKeySeesEverythingAndTheErrorListsEveryEntity() throws {
        let peer = try session(Self.ops)
        let answer = try call(peer, Self.ops, StoreFetch.name, #"{"entity": "Secret"}"#)
        XCTAssertEqual(answer["result"]?["objects"]?.arrayValue?.count, 1)
        let unknown = try call(peer, Self.ops, StoreFetch.name, #"{"entity": "Nope"}"#)
        XCTAssertEqual(
            unknown["error"]?["message"], "unknown entity 'Nope' (the model has: Note, Secret)", "\(unknown)")
    }

    func testAScopedKeysUnknownEntityErrorListsOnlyTheEntitiesItReads() throws {
        let peer = try session(Self.alice)
        let unknown = try call(peer, Self.alice, StoreFetch.name, #"{"entity": "Nope"}"#)
        XCTAssertEqual(unknown["error"]?["message"], "unknown entity 'Nope' (the model has: Note)", "\(unknown)")
        XCTAssertEqual(unknown["error"]?["data"]?["field"], "params.entity", "\(unknown)")
    }

    /// A relationship to an entity the key cannot read does not exist for it either (DESIGN.md §2):
    /// `model/get` leaves it out, objects do not carry it (fetched, got, live, `store/didSave`),
    /// naming it is the unknown-key -32602, and changed-key lists leave it out.
    func testARelationshipToAHiddenEntityDoesNotExistForTheKey() throws {
        XCTAssertNotNil(
            try unscoped(StoreSave.name, #"{"updated": [{"id": "Note/1", "values": {"secret": "Secret/1"}}]}"#)[
                "result"])
        let peer = try session(Self.alice)
        let model = try call(peer, Self.alice, ModelGet.name, "{}")
        let note = model["result"]?["entities"]?.arrayValue?.first
        XCTAssertEqual(note?["name"], "Note")
        XCTAssertEqual(note?["relationships"]?.arrayValue ?? [], [], "\(model)")
        let fetched = try call(peer, Self.alice, StoreFetch.name, #"{"entity": "Note", "sort": [{"key": "title"}]}"#)
        XCTAssertEqual(titles(fetched["result"]?["objects"]), ["alice-1", "alice-2"])
        XCTAssertEqual(fetched["result"]?["objects"]?.arrayValue?.first?["title"], "alice-1")
        XCTAssertNil(fetched["result"]?["objects"]?.arrayValue?.first?["secret"], "\(fetched)")
        let got = try call(peer, Self.alice, StoreGet.name, #"{"ids": ["Note/1"]}"#)
        XCTAssertEqual(got["result"]?["objects"]?.arrayValue?.first?["title"], "alice-1")
        XCTAssertNil(got["result"]?["objects"]?.arrayValue?.first?["secret"], "\(got)")
        let subscribed = try call(
            peer, Self.alice, ResultsSubscribe.name,
            #"{"request": {"entity": "Note", "sort": [{"key": "title"}]}, "include": "all"}"#)
        XCTAssertEqual(titles(subscribed["result"]?["objects"]), ["alice-1", "alice-2"], "\(subscribed)")
        XCTAssertNotNil(
            try call(peer, Self.alice, StoreObserve.name, #"{"entities": ["Note"], "includeValues": true}"#)["result"])
        // The admin moves alice-1 to no secret and back, renaming it: alice hears of the title only.
        XCTAssertNotNil(
            try unscoped(
                StoreSave.name, #"{"updated": [{"id": "Note/1", "values": {"title": "alice-1b", "secret": null}}]}"#)[
                    "result"])
        XCTAssertNotNil(
            try unscoped(
                StoreSave.name,
                #"{"updated": [{"id": "Note/1", "values": {"title": "alice-1c", "secret": "Secret/1"}}]}"#)[
                    "result"])
        let heard = try outbox.wait(for: peer) { messages in
            messages.filter { $0["method"] == "store/didSave" }.count >= 2
                && messages.contains { $0["method"] == "results/didChange" && self.text($0).contains("alice-1c") }
        }
        let saves = heard.filter { $0["method"] == "store/didSave" }
        XCTAssertEqual(
            saves.compactMap { $0["params"]?["changes"]?["Note"]?["updated"]?.arrayValue?.first?["keys"] },
            [["title"], ["title"]], "\(saves)")
        XCTAssertEqual(saves.last?["params"]?["objects"]?["Note/1"]?["title"], "alice-1c", "\(saves)")
        let history = try call(peer, Self.alice, StoreHistory.name, #"{"since": 2}"#)
        XCTAssertEqual(
            history["result"]?["transactions"]?.arrayValue?.compactMap {
                $0["changes"]?["Note"]?["updated"]?.arrayValue?.first?["keys"]
            }, [["title"], ["title"]], "\(history)")
        XCTAssertFalse(received(by: peer).contains("Secret"), received(by: peer))
        XCTAssertFalse(received(by: peer).contains("secret"), received(by: peer))

        // Naming it is naming an unknown key, error for error.
        for (hidden, unknown) in [
            (#"{"entity": "Note", "properties": ["secret"]}"#, #"{"entity": "Note", "properties": ["nope"]}"#),
            (
                #"{"entity": "Note", "predicate": "secret.code == 'x'"}"#,
                #"{"entity": "Note", "predicate": "nope.code == 'x'"}"#
            ),
            (#"{"entity": "Note", "predicate": "secret == nil"}"#, #"{"entity": "Note", "predicate": "nope == nil"}"#),
            (#"{"entity": "Note", "prefetch": ["secret"]}"#, #"{"entity": "Note", "prefetch": ["nope"]}"#),
        ] {
            let refused = error(try call(peer, Self.alice, StoreFetch.name, hidden))
            let other = error(try call(peer, Self.alice, StoreFetch.name, unknown))
            XCTAssertEqual(refused?["code"], .int(-32602), "\(hidden): \(refused.map(text) ?? "")")
            XCTAssertEqual(
                refused.map(text), other.map(text).map { $0.replacingOccurrences(of: "nope", with: "secret") }, hidden)
        }
        // So is setting it in a save or a batch update: the same problem as for an unknown key, nothing saved.
        for method in [StoreSave.name, BatchUpdate.name, BatchInsert.name] {
            func params(_ key: String) -> String {
                switch method {
                case StoreSave.name: #"{"updated": [{"id": "Note/1", "values": {"\#(key)": "Secret/1"}}]}"#
                case BatchUpdate.name: #"{"entity": "Note", "values": {"\#(key)": "Secret/1"}}"#
                default:
                    #"{"entity": "Note", "objects": [{"owner": "alice", "title": "t"}, {"owner": "alice", "title": "u", "\#(key)": "Secret/1"}]}"#
                }
            }
            let refused = error(try call(peer, Self.alice, method, params("secret")))
            let other = error(try call(peer, Self.alice, method, params("nope")))
            XCTAssertEqual(refused?["code"], .int(Int64(ErrorCode.validationFailed.rawValue)), method)
            XCTAssertEqual(
                refused.map(text), other.map(text).map { $0.replacingOccurrences(of: "nope", with: "secret") }, method)
            XCTAssertFalse(refused.map(text)?.contains("Secret") ?? true, method)
        }
        // Deleting her note changes the hidden end of its relationship: refused by Secret's write
        // rule, without naming Secret or its object.
        let deleted = error(try call(peer, Self.alice, StoreSave.name, #"{"deleted": [{"id": "Note/1"}]}"#))
        XCTAssertEqual(deleted?["code"], .int(-32018), "\(deleted.map(text) ?? "")")
        XCTAssertFalse(deleted.map(text)?.contains("Secret") ?? true, deleted.map(text) ?? "")
        // A key that reads Secret sees the relationship.
        let ops = try session(Self.ops)
        let all = try call(ops, Self.ops, StoreGet.name, #"{"ids": ["Note/1"]}"#)
        XCTAssertEqual(all["result"]?["objects"]?.arrayValue?.first?["secret"], "Secret/1", "\(all)")
        let opsModel = try call(ops, Self.ops, ModelGet.name, "{}")
        XCTAssertEqual(opsModel["result"]?["entities"]?.arrayValue?.first?["relationships"]?.arrayValue?.count, 1)
    }
}
