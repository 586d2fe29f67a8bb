import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// Text is its UTF-8 bytes (DESIGN.md §4) over a real daemon: the four holes
/// where Swift's canonical equivalence (`"jos\u{E9}" == "jose\u{301}"`) once
/// decided instead of the store (issue 33), each as a user met it.
final class TextIsBytesTests: XCTestCase {
    static let composed = "jos\u{E9}"
    static let decomposed = "jose\u{301}"

    static let entities = [
        EntityDescription(
            name: "Word",
            attributes: [
                AttributeDescription(name: "text", type: .string, optional: true),
                AttributeDescription(name: "n", type: .integer, defaultValue: 0),
            ]),
        EntityDescription(
            name: "Tag", attributes: [AttributeDescription(name: "name", type: .string)],
            uniquenessConstraints: [["name"]]),
    ]

    private func start() async throws -> (Daemon, DepotConnection) {
        let daemon = try Daemon()
        let client = try await daemon.connect(name: "bytes")
        _ = try await client.call(ModelDefine.self, .init(entities: Self.entities))
        return (daemon, client)
    }

    private func texts(_ client: DepotConnection, _ entity: String = "Word", key: String = "text") async throws
        -> [[UInt8]]
    {
        let objects = try await client.call(StoreFetch.self, FetchRequest(entity: entity)).objects ?? []
        return objects.map { Array(($0[key]?.stringValue ?? "").utf8) }
    }

    /// An update from one spelling to the other is a change: saved, counted, and read back byte for byte.
    func testAnUpdateToTheOtherSpellingIsSaved() async throws {
        let (daemon, client) = try await start()
        defer {
            client.abort()
            XCTAssertEqual(daemon.stop(), 0)
        }
        let id = try await client.call(
            StoreSave.self,
            .init(inserted: [InsertedObject(entity: "Word", tempId: "w", values: ["text": .string(Self.decomposed)])])
        ).ids["w"]!
        let updated = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: id, values: ["text": .string(Self.composed)])]))
        XCTAssertGreaterThan(updated.transaction, 0, "the update to the composed spelling was dropped")
        let afterUpdate = try await texts(client)
        XCTAssertEqual(afterUpdate, [Array(Self.composed.utf8)])
        // The same bytes again: nothing changed, transaction 0.
        let same = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: id, values: ["text": .string(Self.composed)])]))
        XCTAssertEqual(same.transaction, 0)

        // batchUpdate to the other spelling counts the row, and only rows of the exact bytes match.
        let counted = try await client.call(
            BatchUpdate.self,
            .init(
                entity: "Word", predicate: "text == $v", arguments: ["v": .string(Self.composed)],
                values: ["text": .string(Self.decomposed)]))
        XCTAssertEqual(counted.count, 1)
        let afterBatch = try await texts(client)
        XCTAssertEqual(afterBatch, [Array(Self.decomposed.utf8)])
        let none = try await client.call(
            BatchUpdate.self,
            .init(
                entity: "Word", predicate: "text == $v", arguments: ["v": .string(Self.composed)],
                values: ["text": "x"]))
        XCTAssertEqual(none.count, 0, "the composed spelling matched the decomposed row")
        // An optimistic-lock original in the other spelling is a conflict, not a match.
        await assertServerError(.mergeConflict) {
            try await client.call(
                StoreSave.self,
                .init(updated: [
                    UpdatedObject(id: id, original: ["text": .string(Self.composed)], values: ["text": "y"])
                ]))
        }
        let unchanged = try await texts(client)
        XCTAssertEqual(unchanged, [Array(Self.decomposed.utf8)])
    }

    /// A unique key takes both spellings, as SQLite's unique index does: in one save, in two, in a batch.
    func testAUniqueKeyTakesBothSpellings() async throws {
        let (daemon, client) = try await start()
        defer {
            client.abort()
            XCTAssertEqual(daemon.stop(), 0)
        }
        _ = try await client.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Tag", values: ["name": .string(Self.composed)]),
                InsertedObject(entity: "Tag", values: ["name": .string(Self.decomposed)]),
            ]))
        _ = try await client.call(
            StoreSave.self, .init(inserted: [InsertedObject(entity: "Tag", values: ["name": "\u{212B}"])]))
        _ = try await client.call(
            StoreSave.self, .init(inserted: [InsertedObject(entity: "Tag", values: ["name": "\u{C5}"])]))
        let batch = try await client.call(
            BatchInsert.self,
            .init(
                entity: "Tag", objects: [["name": "A\u{30A}"], ["name": "\u{FB01}"], ["name": "fi"]], onConflict: .error
            ))
        XCTAssertEqual(batch.inserted, 3)
        let names = try await texts(client, "Tag", key: "name")
        XCTAssertEqual(names.count, 7)
        // The same bytes twice is still a duplicate (-32011), and nothing is saved.
        await assertServerError(.uniqueConstraint) {
            try await client.call(
                StoreSave.self,
                .init(inserted: [InsertedObject(entity: "Tag", values: ["name": .string(Self.decomposed)])]))
        }
        let after = try await texts(client, "Tag", key: "name")
        XCTAssertEqual(after.count, 7)
    }

    /// A live grouped result keeps every spelling's group, as the grouped fetch does, and its deltas
    /// reproduce the fetch.
    func testALiveGroupedResultKeepsEverySpellingApart() async throws {
        let (daemon, client) = try await start()
        defer {
            client.abort()
            XCTAssertEqual(daemon.stop(), 0)
        }
        let request = FetchRequest(
            entity: "Word", sort: [SortDescriptor(key: "text")], groupBy: ["text"],
            aggregates: [ExpressionDescription(name: "count", function: .count)])
        let collector = ChangeCollector(client)
        let subscribed = try await client.call(ResultsSubscribe.self, .init(request: request, include: .all))
        var held = HeldResults(answer: try JSONCoding.encode(subscribed)) {
            "group:" + String(decoding: JSONWriter.encode([$0["text"] ?? .null]), as: UTF8.self)
        }
        let spellings = [Self.composed, Self.decomposed, "\u{C5}", "A\u{30A}", "\u{212B}"]
        for (round, text) in (spellings + spellings).enumerated() {
            let save = try await client.call(
                StoreSave.self, .init(inserted: [InsertedObject(entity: "Word", values: ["text": .string(text)])]))
            let change = try await collector.expect(for: subscribed.subscription)
            XCTAssertEqual(change.transaction, save.transaction)
            XCTAssertNil(held.apply(try JSONCoding.encode(change)), "round \(round)")
        }
        let fresh = try await client.call(StoreFetch.self, request).objects ?? []
        XCTAssertEqual(fresh.count, 5, "the grouped fetch keeps five groups")
        XCTAssertEqual(held.objects.count, 5, "the live result keeps five groups")
        XCTAssertTrue(held.objects.allSatisfy { $0["id"]?.stringValue?.hasPrefix("group:") == true })
        XCTAssertTrue(LookAlikeText.withoutGroupIDs(held.objects) == fresh, "held \(LookAlikeText.visible(.array(held.objects)))")
        XCTAssertEqual(fresh.map { $0["count"] }, Array(repeating: 2, count: 5))
    }

    /// Two keys whose names are canonically equivalent, scoped `owner == $keyName`: each holds its own
    /// result set and observer, and hears only of its own rows.
    func testKeysNamedAlikeShareNoResultsAndNoObserver() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-bytes-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try CurveKeyPair.generate()
        let composedKey = try CurveKeyPair.generate()
        let decomposedKey = try CurveKeyPair.generate()
        let adminKey = try CurveKeyPair.generate()
        try "\(server.secretKey)\n".write(
            to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        let keys =
            "\(composedKey.publicKey) member \(Self.composed)\n\(decomposedKey.publicKey) member \(Self.decomposed)\n\(adminKey.publicKey) admin admin\n"
        try keys.write(to: directory.appendingPathComponent("keys"), atomically: true, encoding: .utf8)
        try
            #"{"roles": {"member": {"base": "write", "entities": {"Word": {"read": "text == $keyName", "write": "text == $keyName"}}}}}"#
            .write(to: directory.appendingPathComponent("policy.json"), atomically: true, encoding: .utf8)
        let daemon = try Daemon(
            dataDirectory: directory.appendingPathComponent("data"),
            arguments: [
                "--curve-secret-key", directory.appendingPathComponent("server.key").path, "--authorized-keys",
                directory.appendingPathComponent("keys").path, "--policy",
                directory.appendingPathComponent("policy.json").path,
            ])
        defer { XCTAssertEqual(daemon.stop(), 0) }
        func connect(_ pair: CurveKeyPair, _ name: String) async throws -> DepotConnection {
            try await DepotConnection.connect(
                to: daemon.endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(10),
                keys: try ClientKeys(serverKey: server.publicKey, secretKey: pair.secretKey))
        }
        let admin = try await connect(adminKey, "admin")
        _ = try await admin.call(ModelDefine.self, .init(entities: Self.entities))
        let first = try await connect(composedKey, "composed")
        let second = try await connect(decomposedKey, "decomposed")
        defer { [admin, first, second].forEach { $0.abort() } }

        let request = FetchRequest(entity: "Word", sort: [SortDescriptor(key: "n")])
        let firstCollector = ChangeCollector(first)
        let secondCollector = ChangeCollector(second)
        let firstSubscription = try await first.call(ResultsSubscribe.self, .init(request: request, include: .all))
        let secondSubscription = try await second.call(ResultsSubscribe.self, .init(request: request, include: .all))
        let firstObserver = try await first.call(StoreObserve.self, .init(includeValues: true)).observer
        let secondObserver = try await second.call(StoreObserve.self, .init(includeValues: true)).observer
        let sets = try await admin.call(ServerStats.self, .init()).subscriptions
        XCTAssertEqual(sets.count, 2, "the two keys' requests share one set")

        // Each key saves one word of its own name (its write scope allows exactly that).
        let mine = try await first.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Word", tempId: "a", values: ["text": .string(Self.composed), "n": 1])
            ])
        ).ids["a"]!
        let theirs = try await second.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Word", tempId: "b", values: ["text": .string(Self.decomposed), "n": 2])
            ])
        ).ids["b"]!
        let firstChange = try await firstCollector.expect(for: firstSubscription.subscription)
        XCTAssertEqual(firstChange.objects.map(\.id), [mine])
        let secondChange = try await secondCollector.expect(for: secondSubscription.subscription)
        XCTAssertEqual(secondChange.objects.map(\.id), [theirs])
        let firstSave = await firstCollector.take { $0.decode(DidSave.self)?.observer == firstObserver }?.decode(
            DidSave.self)
        XCTAssertEqual(firstSave?.changes["Word"]?.inserted, [mine])
        XCTAssertNil(firstSave?.objects?[theirs])
        let secondSave = await secondCollector.take { $0.decode(DidSave.self)?.observer == secondObserver }?.decode(
            DidSave.self)
        XCTAssertEqual(secondSave?.changes["Word"]?.inserted, [theirs])
        // Nothing more: neither heard of the other's row.
        try await Task.sleep(for: .milliseconds(300))
        for (collector, other) in [(firstCollector, theirs), (secondCollector, mine)] {
            for note in collector.drain() {
                let text = String(decoding: JSONWriter.encode(note.params), as: UTF8.self)
                XCTAssertFalse(text.contains(other), "\(note.method) carried the other key's row: \(text)")
            }
        }
        // Fetches agree: each key reads its own row only, byte for byte.
        let firstRows = try await first.call(StoreFetch.self, request).objects ?? []
        XCTAssertEqual(
            firstRows.compactMap { $0["text"]?.stringValue }.map { Array($0.utf8) }, [Array(Self.composed.utf8)])
        let secondRows = try await second.call(StoreFetch.self, request).objects ?? []
        XCTAssertEqual(
            secondRows.compactMap { $0["text"]?.stringValue }.map { Array($0.utf8) }, [Array(Self.decomposed.utf8)])
    }
}
