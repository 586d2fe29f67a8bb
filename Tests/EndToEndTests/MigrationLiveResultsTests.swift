import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Live results across a migration (DESIGN.md §7, Across a migration), against a real daemon:
/// the migration is a transaction whose `results/didChange` updates the rows whose values it
/// changed, objects come in the new shape from then on, and a request that names a renamed key
/// ends with `results/didInvalidate {reason: "model"}`.
final class MigrationLiveResultsTests: XCTestCase {
    static let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "name")])

    /// Item with `extra` attributes added to ``WorldCup/item``'s.
    static func item(_ extra: [AttributeDescription]) -> EntityDescription {
        var item = WorldCup.item
        item.attributes += extra
        return item
    }

    /// An object with its nil members left out: a key an object lacks reads as nil.
    static func normalized(_ objects: [JSONValue]) -> [JSONValue] {
        objects.map { object in .object((object.objectValue ?? [:]).filter { !$0.value.isNull }) }
    }

    func testAMigrationUpdatesTheRowsItChangedAndObjectsComeInTheNewShape() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        defer { connection.abort() }
        try await connection.loadItems(3)
        let collector = ChangeCollector(connection)
        let subscribed = try await connection.call(
            ResultsSubscribe.self, .init(request: Self.request, include: .all))
        var mirror = ResultsMirror(subscribed, request: Self.request, sectionKeyPath: nil)
        let controller = FetchedResultsController<DepotObject>(fetchRequest: Self.request, connection: connection)
        let controllerChanges = controller.changes()
        try await controller.performFetch()

        // An optional attribute and one with a default: the default is a new value in every row.
        let defined = try await connection.call(
            ModelDefine.self,
            .init(entities: [
                Self.item([
                    AttributeDescription(name: "note", type: .string, optional: true),
                    AttributeDescription(name: "priority", type: .integer, defaultValue: 3),
                ])
            ]))
        let transaction = try XCTUnwrap(defined.transaction, "a migration is a transaction")
        let migrated = try await collector.expect(for: subscribed.subscription)
        XCTAssertEqual(migrated.transaction, transaction)
        XCTAssertEqual(migrated.objects.map(\.type), [.update, .update, .update])
        XCTAssertEqual(migrated.objects.map { $0.object?["priority"] }, [3, 3, 3])
        mirror.apply(migrated)
        var fresh = try await connection.call(StoreFetch.self, Self.request).objects ?? []
        XCTAssertEqual(Self.normalized(mirror.sections.flatMap(\.objects)), Self.normalized(fresh))

        // An object saved with the new attribute arrives with it.
        _ = try await connection.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(
                    entity: "Item", tempId: "n",
                    values: ["name": "item 001½", "note": "new", "createdAt": "2026-01-01T00:00:00Z"])
            ]))
        let inserted = try await collector.expect(for: subscribed.subscription)
        XCTAssertEqual(inserted.objects.map(\.type), [.insert])
        XCTAssertEqual(inserted.objects.first?.object?["note"], "new")
        XCTAssertEqual(inserted.objects.first?.object?["priority"], 3)
        mirror.apply(inserted)
        fresh = try await connection.call(StoreFetch.self, Self.request).objects ?? []
        XCTAssertEqual(Self.normalized(mirror.sections.flatMap(\.objects)), Self.normalized(fresh))

        // The Swift controller shows the new shape too.
        let shown = await ClientSupport.wait(on: controllerChanges) {
            controller.fetchedObjects?.map {
                "\($0.string("name") ?? ""):\($0.int("priority") ?? -1):\($0.string("note") ?? "-")"
            }
                == ["item 000:3:-", "item 001:3:-", "item 001½:3:new", "item 002:3:-"]
        }
        XCTAssertTrue(shown, "the controller holds \(controller.fetchedObjects ?? [])")
        await controller.unsubscribe()
    }

    func testRenamingAKeyTheRequestNamesEndsTheSubscriptionWithReasonModel() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        defer { connection.abort() }
        try await connection.loadItems(2)
        let collector = ChangeCollector(connection)
        let byName = try await connection.call(ResultsSubscribe.self, .init(request: Self.request, include: .all))
        let other = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        let byDate = try await connection.call(ResultsSubscribe.self, .init(request: other, include: .all))
        var mirror = ResultsMirror(byDate, request: other, sectionKeyPath: nil)

        var renamed = WorldCup.item
        renamed.attributes[0] = AttributeDescription(name: "title", type: .string, renamedFrom: "name")
        let defined = try await connection.call(ModelDefine.self, .init(entities: [renamed]))
        XCTAssertNotNil(defined.transaction)
        let ended = await collector.take { $0.decode(ResultsDidInvalidate.self) != nil }
        XCTAssertEqual(
            ended?.decode(ResultsDidInvalidate.self), .init(subscription: byName.subscription, reason: "model"))
        // The other subscription carries the key under its new name, as updates of the migration.
        let change = try await collector.expect(for: byDate.subscription)
        XCTAssertEqual(change.transaction, defined.transaction)
        XCTAssertEqual(change.objects.map(\.type), [.update, .update])
        XCTAssertEqual(Set(change.objects.compactMap { $0.object?["title"]?.stringValue }), ["item 000", "item 001"])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(connection)

        // The ended subscription is gone; subscribing to the same request names the key.
        do {
            _ = try await connection.call(ResultsSnapshot.self, .init(subscription: byName.subscription))
            XCTFail("the invalidated subscription still answers")
        } catch {
            XCTAssertEqual(error.rpcError?.code, .notFound)
        }
        do {
            _ = try await connection.call(ResultsSubscribe.self, .init(request: Self.request))
            XCTFail("a request naming the old key was subscribed")
        } catch {
            XCTAssertEqual(error.rpcError?.code, .invalidParams)
            XCTAssertEqual(error.rpcError?.data?["field"], "params.request.sort[0].key", "\(error)")
        }
    }

    /// Records the ends a controller reports.
    @MainActor
    final class EndLog: FetchedResultsControllerDelegate {
        private(set) var ends: [FetchedResultsEnd] = []
        private(set) var reloads = 0
        func controller(_ controller: any FetchedResultsControlling, didEnd end: FetchedResultsEnd) {
            ends.append(end)
        }
        func controllerDidReloadContent(_ controller: any FetchedResultsControlling) { reloads += 1 }
    }

    /// The Swift controller surfaces `results/didInvalidate {reason: "model"}`: where its request
    /// names a renamed key it ends, telling the delegate why (the daemon's -32602 naming the key)
    /// and keeping what it showed; a new request fetches again. A controller whose request still
    /// holds follows the migration without ending.
    @MainActor
    func testAControllerWhoseRequestNamesARenamedKeyEndsAndTellsItsDelegate() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        defer { connection.abort() }
        try await connection.loadItems(2)
        let controller = FetchedResultsController<DepotObject>(fetchRequest: Self.request, connection: connection)
        let log = EndLog()
        controller.delegate = log
        try await controller.performFetch()
        let other = FetchedResultsController<DepotObject>(
            fetchRequest: FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")]), connection: connection
        )
        let otherLog = EndLog()
        other.delegate = otherLog
        try await other.performFetch()
        let otherChanges = other.changes()

        var renamed = WorldCup.item
        renamed.attributes[0] = AttributeDescription(name: "title", type: .string, renamedFrom: "name")
        _ = try await connection.call(ModelDefine.self, .init(entities: [renamed]))
        for _ in 0..<200 where log.ends.isEmpty { try await Task.sleep(for: .milliseconds(25)) }
        XCTAssertEqual(log.ends.map(\.reason), ["model"])
        XCTAssertEqual(log.ends.first?.error.rpcError?.code, .invalidParams)
        XCTAssertEqual(log.ends.first?.error.rpcError?.data?["field"], "params.request.sort[0].key")
        XCTAssertEqual(controller.end?.reason, "model")
        XCTAssertNil(controller.subscription, "no subscription is left behind")
        XCTAssertEqual(log.reloads, 0)
        XCTAssertEqual(controller.fetchedObjects?.map(\.id).count, 2, "what it showed stays")

        // The other request holds: its controller shows the new key, without ending.
        let followed = await ClientSupport.wait(on: otherChanges) {
            other.fetchedObjects?.compactMap { $0.string("title") } == ["item 000", "item 001"]
        }
        XCTAssertTrue(followed, "\(other.fetchedObjects ?? [])")
        XCTAssertTrue(otherLog.ends.isEmpty)
        XCTAssertNil(other.end)

        // A request in the new model fetches again, and the end is over.
        controller.fetchRequest = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "title")])
        try await controller.performFetch()
        XCTAssertNil(controller.end)
        XCTAssertEqual(controller.fetchedObjects?.compactMap { $0.string("title") }, ["item 000", "item 001"])
        await controller.unsubscribe()
        await other.unsubscribe()
    }

    /// On a PostgreSQL cluster a migration is a numbered transaction of the log like a save
    /// (docs/cluster.md): made through one daemon, it reaches another daemon's subscriptions as
    /// updates of the rows it changed and as `didInvalidate {reason: "model"}` where a request
    /// names a renamed key, and both daemons' history show it under the same number.
    func testAMigrationThroughOneDaemonOfAClusterReachesAnothersSubscriptions() async throws {
        guard let url = ProcessInfo.processInfo.environment["DEPOT_TEST_STORE"], !url.isEmpty else {
            throw XCTSkip("needs PostgreSQL (DEPOT_TEST_STORE, as scripts/with-postgres.sh sets)")
        }
        let store = "\(url)?schema=migrate_\(UUID().uuidString.prefix(8).lowercased())"
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-e2e-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let one = try Daemon(dataDirectory: directory.appendingPathComponent("one"), arguments: ["--store", store])
        let two = try Daemon(dataDirectory: directory.appendingPathComponent("two"), arguments: ["--store", store])
        let writer = try await one.connect()
        let reader = try await two.connect()
        defer { [writer, reader].forEach { $0.abort() } }
        try await writer.loadItems(3)
        let loaded = try await writer.call(StoreHistory.self, .init(since: 0)).latest
        var seen = try await reader.call(StoreHistory.self, .init(since: 0)).latest
        for _ in 0..<200 where seen < loaded {
            try await Task.sleep(for: .milliseconds(50))
            seen = try await reader.call(StoreHistory.self, .init(since: 0)).latest
        }
        XCTAssertEqual(seen, loaded, "the second daemon follows the first")

        let collector = ChangeCollector(reader)
        let byName = try await reader.call(ResultsSubscribe.self, .init(request: Self.request, include: .all))
        let other = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        let byDate = try await reader.call(ResultsSubscribe.self, .init(request: other, include: .all))
        var mirror = ResultsMirror(byDate, request: other, sectionKeyPath: nil)

        var migrated = Self.item([AttributeDescription(name: "priority", type: .integer, defaultValue: 4)])
        migrated.attributes[0] = AttributeDescription(name: "title", type: .string, renamedFrom: "name")
        let defined = try await writer.call(ModelDefine.self, .init(entities: [migrated]))
        let transaction = try XCTUnwrap(defined.transaction, "a cluster's migration is a transaction")
        XCTAssertEqual(transaction, loaded + 1)

        let ended = await collector.take { $0.decode(ResultsDidInvalidate.self) != nil }
        XCTAssertEqual(
            ended?.decode(ResultsDidInvalidate.self), .init(subscription: byName.subscription, reason: "model"))
        let change = try await collector.expect(for: byDate.subscription)
        XCTAssertEqual(change.transaction, transaction, "the migration's own notification on the other daemon")
        XCTAssertEqual(change.objects.map(\.type), [.update, .update, .update])
        XCTAssertEqual(change.objects.map { $0.object?["priority"] }, [4, 4, 4])
        XCTAssertEqual(
            Set(change.objects.compactMap { $0.object?["title"]?.stringValue }), ["item 000", "item 001", "item 002"])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(reader)

        // A save through the first daemon arrives on the second in the new shape.
        _ = try await writer.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(
                    entity: "Item", values: ["title": "item 003", "createdAt": "2026-01-02T00:00:00Z"])
            ]))
        let inserted = try await collector.expect(for: byDate.subscription)
        XCTAssertEqual(inserted.transaction, transaction + 1)
        XCTAssertEqual(inserted.objects.first?.object?["title"], "item 003")
        XCTAssertEqual(inserted.objects.first?.object?["priority"], 4)
        mirror.apply(inserted)
        try await mirror.assertMatchesFreshFetch(reader)

        // Both daemons' history hold the migration, with no object changes, under its number.
        let here = try await writer.call(StoreHistory.self, .init(since: loaded))
        let there = try await reader.call(StoreHistory.self, .init(since: loaded))
        XCTAssertEqual(here.transactions.map(\.transaction), [transaction, transaction + 1])
        XCTAssertEqual(there.transactions.map(\.transaction), here.transactions.map(\.transaction))
        XCTAssertEqual(there.transactions.first?.changes, [:])
        XCTAssertEqual(there.transactions.map(\.changes), here.transactions.map(\.changes))
        XCTAssertEqual(two.stop(), 0)
        XCTAssertEqual(one.stop(), 0)
    }

    /// A controller's replica file records the model version of its results (DESIGN.md §9): the
    /// next run catches up while the model is the same, and resyncs once a migration changed it
    /// (history does not hold the values a migration changed).
    func testAReplicaFileOfAnotherModelVersionResyncs() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        defer { connection.abort() }
        try await connection.loadItems(3)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite")
        defer { try? FileManager.default.removeItem(at: file) }
        func run() async throws -> FetchedResultsController<DepotObject> {
            let controller = FetchedResultsController<DepotObject>(
                fetchRequest: Self.request, connection: connection, persistentStore: file)
            try await controller.performFetch()
            XCTAssertNil(controller.persistentStoreError)
            await controller.unsubscribe()
            return controller
        }
        _ = try await run()
        let same = try await run()
        XCTAssertEqual(same.lastCatchUp?.resynced, false, "the same model: caught up from the file")

        _ = try await connection.call(
            ModelDefine.self,
            .init(entities: [Self.item([AttributeDescription(name: "priority", type: .integer, defaultValue: 7)])]))
        let migrated = try await run()
        XCTAssertEqual(migrated.lastCatchUp?.resynced, true, "another model: resynced, not caught up")
        XCTAssertEqual(migrated.fetchedObjects?.map { $0.int("priority") }, [7, 7, 7])
        let after = try await run()
        XCTAssertEqual(after.lastCatchUp?.resynced, false, "the new model recorded: caught up again")
        XCTAssertEqual(after.fetchedObjects?.map { $0.int("priority") }, [7, 7, 7])
    }
}
