import DepotClient
import DepotTestSupport
import Foundation
import Synchronization
import XCTest

/// Records delegate calls on the delivery actor, grouped per change.
/// Main-actor isolated, as the delegate protocol is.
final class CallLog: FetchedResultsControllerDelegate {
    private let lock = NSLock()
    private var current: [String] = []
    private var batches: [[String]] = []
    private var reloads = 0

    var changeBatches: [[String]] { lock.withLock { batches } }
    var reloadCount: Int { lock.withLock { reloads } }

    func controllerWillChangeContent(_ controller: any FetchedResultsControlling) {
        lock.withLock { current = ["will"] }
    }
    func controller(
        _ controller: any FetchedResultsControlling, didChange sectionInfo: any FetchedResultsSectionInfo,
        atSectionIndex sectionIndex: Int,
        for type: FetchedResultsChangeType
    ) { lock.withLock { current.append("section \(type) \(sectionIndex) \(sectionInfo.name)") } }
    func controller(
        _ controller: any FetchedResultsControlling, didChange anObject: Any, at indexPath: IndexPath?,
        for type: FetchedResultsChangeType,
        newIndexPath: IndexPath?
    ) { lock.withLock { current.append("object \(type) \((anObject as? DepotObject)?.id ?? "?")") } }
    func controllerDidChangeContent(_ controller: any FetchedResultsControlling) {
        lock.withLock {
            batches.append(current + ["did"])
            current = []
        }
    }
    func controllerDidReloadContent(_ controller: any FetchedResultsControlling) { lock.withLock { reloads += 1 } }
}

/// FetchedResultsController against a real daemon (skipped until the daemon has results/subscribe).
final class ClientFetchedResultsTests: XCTestCase {
    static func teamsRequest(batchSize: Int = 0) -> FetchRequest {
        FetchRequest(
            entity: "Team",
            sortDescriptors: [
                SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false),
                SortDescriptor(key: "teamName"),
            ],
            fetchBatchSize: batchSize)
    }

    /// What a fresh fetch says: section names and ids in order.
    private static func freshLayout(_ connection: DepotConnection) async throws -> [[String]] {
        let objects = try await connection.call(StoreFetch.self, Self.teamsRequest()).objects ?? []
        var sections: [(String, [String])] = []
        for object in objects {
            let zone = object["qualifyingZone"]?.stringValue ?? ""
            if sections.last?.0 != zone { sections.append((zone, [])) }
            sections[sections.count - 1].1.append(object["id"]!.stringValue!)
        }
        return sections.map { [$0.0] + $0.1 }
    }

    private static func layout(of controller: FetchedResultsController<DepotObject>) -> [[String]] {
        (controller.layout?.sections ?? []).map { [$0.name] + $0.ids }
    }

    @MainActor
    func testPerformFetchGivesSectionsObjectsAndIndexTitles() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: Self.teamsRequest(), connection: connection, sectionNameKeyPath: "qualifyingZone",
            cacheName: "teams")
        XCTAssertNil(controller.fetchedObjects)
        try await controller.performFetch()
        XCTAssertEqual(
            controller.sections?.map(\.name), ["Africa", "Asia", "Europe", "North America", "South America"])
        XCTAssertEqual(controller.sections?.map(\.numberOfObjects), [5, 4, 13, 4, 6])
        XCTAssertEqual(controller.sectionIndexTitles, ["A", "E", "N", "S"])
        XCTAssertEqual(controller.section(forSectionIndexTitle: "N", at: 3), 3)
        XCTAssertEqual(controller.fetchedObjects?.count, 32)
        XCTAssertEqual(controller.object(at: IndexPath(item: 0, section: 0)).string("teamName"), "Algeria")
        let brazil = try XCTUnwrap(controller.fetchedObjects?.first { $0.id == ids["Brazil"] })
        XCTAssertEqual(controller.indexPath(forObject: brazil), IndexPath(item: 1, section: 4))
        XCTAssertEqual(
            controller.sections?[4].objects.map { $0.string("teamName") ?? "" }.prefix(2), ["Argentina", "Brazil"])
        try await FetchedResultsController<DepotObject>.deleteCache(withName: "teams", connection: connection)
    }

    @MainActor
    func testDelegateHearsWillSectionsObjectsDidInOrder() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: Self.teamsRequest(), connection: connection, sectionNameKeyPath: "qualifyingZone")
        let log = CallLog()
        controller.delegate = log
        try await controller.performFetch()
        let changes = controller.changes()
        // Moving Brazil to a new zone inserts a section and moves an object.
        _ = try await connection.call(
            StoreSave.self,
            .init(updated: [UpdatedObject(id: ids["Brazil"]!, values: ["qualifyingZone": "Antarctica"])]))
        let changeSet = await ClientSupport.first(changes)
        XCTAssertEqual(changeSet?.sectionChanges, [.init(type: .insert, index: 1, name: "Antarctica")])
        XCTAssertEqual(
            log.changeBatches.last, ["will", "section insert 1 Antarctica", "object move \(ids["Brazil"]!)", "did"])
        XCTAssertEqual(controller.indexPath(forID: ids["Brazil"]!), IndexPath(item: 0, section: 1))
        XCTAssertEqual(controller.object(at: IndexPath(item: 0, section: 1)).string("qualifyingZone"), "Antarctica")
    }

    /// Random saves from a second connection; after each, the controller must equal a fresh fetch.
    @MainActor
    func testControllerFollowsRandomSavesFromAnotherConnection() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect(name: "viewer")
        try await ClientSupport.requireFetchedResults(connection)
        let writer = try await daemon.connect(name: "writer")
        var ids = Array(try await writer.loadWorldCup().values).sorted()
        let zones = ["Africa", "Asia", "Europe", "North America", "Oceania", "South America"]
        for batchSize in [0, 5] {
            let controller = FetchedResultsController<DepotObject>(
                fetchRequest: Self.teamsRequest(batchSize: batchSize), connection: connection,
                sectionNameKeyPath: "qualifyingZone")
            let log = CallLog()
            controller.delegate = log
            try await controller.performFetch()
            let changes = controller.changes()
            var generator = SystemRandomNumberGenerator()
            for step in 0..<25 {
                var params = StoreSave.Parameters()
                for id in ids.shuffled(using: &generator).prefix(Int.random(in: 1...3, using: &generator)) {
                    switch Int.random(in: 0..<10, using: &generator) {
                    case 0:
                        params.deleted.append(DeletedObject(id: id))
                    case 1...3:
                        params.updated.append(
                            UpdatedObject(
                                id: id, values: ["qualifyingZone": .string(zones.randomElement(using: &generator)!)]))
                    case 4:
                        params.updated.append(UpdatedObject(id: id, values: ["imageName": .string("flag-\(step)")]))
                    default:
                        params.updated.append(
                            UpdatedObject(id: id, values: ["wins": .int(Int64.random(in: 0...7, using: &generator))]))
                    }
                }
                if Bool.random(using: &generator) {
                    params.inserted.append(
                        InsertedObject(
                            entity: "Team", tempId: "t",
                            values: [
                                "teamName": .string("Team \(batchSize)-\(step)"),
                                "qualifyingZone": .string(zones.randomElement(using: &generator)!),
                                "wins": .int(Int64.random(in: 0...7, using: &generator)),
                            ]))
                }
                let result = try await writer.call(StoreSave.self, params)
                ids.removeAll { id in params.deleted.contains { $0.id == id } }
                ids += result.ids.values
                let expected = try await Self.freshLayout(writer)
                let caughtUp = await ClientSupport.wait(on: changes) { Self.layout(of: controller) == expected }
                XCTAssertTrue(
                    caughtUp, "step \(step), batch \(batchSize): \(Self.layout(of: controller)) != \(expected)")
                guard caughtUp else { return }
                // Values too: every object the controller hands out equals the store's.
                let stored = try await writer.call(StoreFetch.self, Self.teamsRequest()).objects ?? []
                XCTAssertEqual(controller.fetchedObjects?.map(\.json), stored, "step \(step)")
            }
            for batch in log.changeBatches {
                XCTAssertEqual(batch.first, "will")
                XCTAssertEqual(batch.last, "did")
                let kinds = batch.dropFirst().dropLast().map { $0.hasPrefix("section") ? 0 : 1 }
                XCTAssertEqual(kinds, kinds.sorted(), "sections before objects: \(batch)")
            }
            XCTAssertEqual(log.reloadCount, 0, "no resync was needed")
            await controller.unsubscribe()
        }
    }

    @MainActor
    func testBatchFaultingLoadsObjectsAsTheyAreTouched() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        try await connection.loadItems(200)
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: FetchRequest(
                entity: "Item", sortDescriptors: [SortDescriptor(key: "name")], fetchBatchSize: 20),
            connection: connection)
        try await controller.performFetch()
        XCTAssertEqual(controller.fetchedIDs.count, 200)
        XCTAssertEqual(controller.object(at: IndexPath(item: 150, section: 0)).string("name"), "item 150")
        try await controller.loadObjects(at: (60..<80).map { IndexPath(item: $0, section: 0) })
        XCTAssertEqual(controller.object(at: IndexPath(item: 61, section: 0)).string("name"), "item 061")
        XCTAssertEqual(
            controller.fetchedObjects?.map { $0.string("name")! }, (0..<200).map { String(format: "item %03d", $0) })
    }
}
