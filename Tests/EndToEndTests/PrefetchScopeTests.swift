import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// Scoped prefetch over a real daemon with a policy (DESIGN.md §5, §7): a
/// related object outside the key's read scope never reaches it, fetched or
/// live; an object entering the scope is an `update` of the rows showing it,
/// carrying the object, and one leaving it comes in `relatedRemoved`.
final class PrefetchScopeTests: XCTestCase {
    var directory: URL!
    var server: CurveKeyPair!
    var clients: [String: CurveKeyPair] = [:]
    var daemon: Daemon!

    static let model = #"""
        {"entities": [
          {"name": "Folder", "attributes": [{"name": "name", "type": "string"}, {"name": "owner", "type": "string"}],
           "relationships": [{"name": "notes", "destination": "Note", "toMany": true, "inverse": "folder"}]},
          {"name": "Note", "attributes": [{"name": "title", "type": "string"}, {"name": "owner", "type": "string"},
             {"name": "shared", "type": "boolean", "default": false}],
           "relationships": [{"name": "folder", "destination": "Folder", "inverse": "notes"},
             {"name": "secret", "destination": "Secret"}]},
          {"name": "Secret", "attributes": [{"name": "code", "type": "string"}]}
        ]}
        """#

    static let policy = #"""
        {"roles": {"member": {"base": "write", "entities": {
            "Note": {"read": "owner == $keyName OR shared == YES", "write": "owner == $keyName"},
            "Folder": {"read": "owner == $keyName", "write": "owner == $keyName"},
            "Secret": {"read": "FALSEPREDICATE", "write": "FALSEPREDICATE"}}}}}
        """#

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-pfscope-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        server = try CurveKeyPair.generate()
        for name in ["alice", "admin"] { clients[name] = try CurveKeyPair.generate() }
        try "\(server.secretKey)\n".write(
            to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        try Self.model.write(to: directory.appendingPathComponent("model.json"), atomically: true, encoding: .utf8)
        try Self.policy.write(to: directory.appendingPathComponent("policy.json"), atomically: true, encoding: .utf8)
        try "\(clients["alice"]!.publicKey) member alice\n\(clients["admin"]!.publicKey) admin admin\n".write(
            to: directory.appendingPathComponent("authorized_keys"), atomically: true, encoding: .utf8)
        daemon = try Daemon(
            dataDirectory: directory.appendingPathComponent("data"),
            arguments: [
                "--curve-secret-key", directory.appendingPathComponent("server.key").path,
                "--authorized-keys", directory.appendingPathComponent("authorized_keys").path,
                "--policy", directory.appendingPathComponent("policy.json").path,
                "--model", directory.appendingPathComponent("model.json").path,
            ])
    }

    override func tearDownWithError() throws {
        if let daemon { XCTAssertEqual(daemon.stop(), 0) }
        daemon = nil
        try? FileManager.default.removeItem(at: directory)
    }

    private func connect(_ name: String) async throws -> DepotConnection {
        try await DepotConnection.connect(
            to: daemon.endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(10),
            keys: try ClientKeys(serverKey: server.publicKey, secretKey: clients[name]!.secretKey))
    }

    func testNoRelatedObjectOutsideTheScopeReachesTheKeyFetchedOrLive() async throws {
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        let saved = try await admin.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Folder", tempId: "mine", values: ["name": "Mine", "owner": "alice"]),
                InsertedObject(entity: "Folder", tempId: "bobs", values: ["name": "Bob's", "owner": "bob"]),
                InsertedObject(
                    entity: "Note", tempId: "a", values: ["title": "a", "owner": "alice", "folder": "mine"]),
                InsertedObject(
                    entity: "Note", tempId: "b",
                    values: ["title": "b", "owner": "bob", "shared": true, "folder": "bobs"]),
                InsertedObject(entity: "Note", tempId: "c", values: ["title": "c", "owner": "bob", "folder": "bobs"]),
            ]))
        let (mine, bobs) = (saved.ids["mine"]!, saved.ids["bobs"]!)
        let request = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")], prefetch: ["folder.notes"])

        // Fetched: alice sees notes a and b, her folder, and not Bob's (nor note c through it).
        let fetched = try await alice.call(StoreFetch.self, request)
        XCTAssertEqual(fetched.objects?.compactMap { $0["title"]?.stringValue }, ["a", "b"])
        XCTAssertEqual(Set(fetched.related?.keys.map { $0 } ?? []), [mine, saved.ids["a"]!])
        // The admin, unscoped, gets both folders and every note they hold.
        let unscoped = try await admin.call(StoreFetch.self, request)
        XCTAssertEqual(unscoped.related?.count, 5)

        // Live: Bob's folder enters alice's scope, then leaves it.
        let notifications = alice.notifications()
        let subscribed = try await alice.call(
            ResultsSubscribe.self, .init(request: request, include: .all))
        XCTAssertEqual(Set(subscribed.related?.keys.map { $0 } ?? []), [mine, saved.ids["a"]!])
        var iterator = notifications.makeAsyncIterator()
        func nextChange() async -> ResultsDidChange.Parameters? {
            while let notification = await iterator.next() {
                if let change = notification.decode(ResultsDidChange.self) { return change }
            }
            return nil
        }
        _ = try await admin.call(StoreSave.self, .init(updated: [UpdatedObject(id: bobs, values: ["owner": "alice"])]))
        let enteredChange = await nextChange()
        let entered = try XCTUnwrap(enteredChange)
        XCTAssertEqual(entered.objects.map(\.id), [saved.ids["b"]!])
        XCTAssertEqual(entered.objects.first?.type, .update)
        XCTAssertEqual(entered.related?[bobs]?["owner"], "alice")
        // Note c is Bob's and not shared: still hidden, though the folder now shows it.
        XCTAssertNil(entered.related?[saved.ids["c"]!])

        _ = try await admin.call(StoreSave.self, .init(updated: [UpdatedObject(id: bobs, values: ["owner": "carl"])]))
        let leftChange = await nextChange()
        let left = try XCTUnwrap(leftChange)
        XCTAssertEqual(left.objects.map(\.id), [saved.ids["b"]!])
        // The folder, and note b as a related object reached only through it, leave alice's graph.
        XCTAssertEqual(left.relatedRemoved, [bobs, saved.ids["b"]!])
        XCTAssertNil(left.related?[bobs])
        let fresh = try await alice.call(StoreFetch.self, request)
        XCTAssertEqual(Set(fresh.related?.keys.map { $0 } ?? []), [mine, saved.ids["a"]!])

        // A relationship into an entity the key cannot read at all does not exist for it (DESIGN.md
        // §2): the unknown-key -32602, fetched or live, naming the path.
        let hidden = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")], prefetch: ["folder", "secret"])
        for method in [StoreFetch.name, ResultsSubscribe.name] {
            let params: JSONValue =
                method == StoreFetch.name
                ? try JSONCoding.encode(hidden) : ["request": try JSONCoding.encode(hidden)]
            do {
                _ = try await alice.call(method: method, params: params)
                XCTFail("\(method) with a prefetch into a hidden entity answered")
            } catch {
                XCTAssertEqual(error.rpcError?.code, .invalidParams, "\(method): \(error)")
                XCTAssertFalse(error.rpcError?.message.contains("Secret") ?? true, "\(method): \(error)")
                let field = method == StoreFetch.name ? "params.prefetch[1]" : "params.request.prefetch[1]"
                XCTAssertEqual(error.rpcError?.data?["field"], .string(field), "\(method)")
            }
        }
        alice.abort()
        admin.abort()
    }
}
