import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// `fetchLimit`/`fetchOffset` through ``FetchedResultsController``: a live top N
/// (and a live page) that changes as other sessions and processes save, checked
/// with the delta oracle (``ResultsMirror``) on what the controller reports and
/// against a fresh fetch of the same window after every save.
final class ClientWindowTests: XCTestCase {
    static let byWins = [SortDescriptor(key: "wins", ascending: false), SortDescriptor(key: "teamName")]

    /// The controller's current results as a subscribe answer, to start a mirror from.
    static func subscribeResult(of controller: FetchedResultsController<DepotObject>) throws -> ResultsSubscribe.Result
    {
        let layout = try XCTUnwrap(controller.layout)
        let objects = (controller.fetchedObjects ?? []).map(\.json)
        return ResultsSubscribe.Result(
            subscription: try XCTUnwrap(controller.subscription), seq: layout.seq, transaction: 0,
            count: layout.count,
            sections: layout.sections.map {
                SectionInfo(name: $0.name, indexTitle: $0.indexTitle, count: $0.ids.count)
            },
            objects: objects)
    }

    @MainActor
    func testFetchLimitKeepsALiveTopNAsOtherProcessesSave() async throws {
        let daemon = try Daemon()
        defer { daemon.stop() }
        let viewer = try await daemon.connect(name: "viewer")
        let writer = try await daemon.connect(name: "writer")
        var ids = Array(try await writer.loadWorldCup().values)
        // A top 5, and the second page of 4 sectioned by wins.
        let topFive = FetchRequest(entity: "Team", sortDescriptors: Self.byWins, fetchLimit: 5)
        var page = FetchRequest(entityName: "Team", predicate: "wins >= %d", 1, sortDescriptors: Self.byWins)
        page.fetchLimit = 4
        page.fetchOffset = 4
        XCTAssertEqual(page.limit, 4)
        XCTAssertEqual(page.offset, 4)
        let setups: [(FetchRequest, String?)] = [(topFive, nil), (page, "wins")]
        var controllers: [FetchedResultsController<DepotObject>] = []
        var logs: [CallLog] = []
        var streams: [AsyncStream<FetchedResultsChangeSet<DepotObject>>] = []
        var mirrors: [ResultsMirror] = []
        for (request, section) in setups {
            let controller = FetchedResultsController<DepotObject>(
                fetchRequest: request, connection: viewer, sectionNameKeyPath: section)
            let log = CallLog()
            controller.delegate = log
            try await controller.performFetch()
            // The top 5 is full from the start; the page fills as teams win.
            XCTAssertEqual(controller.fetchedObjects?.count, section == nil ? 5 : 0, "the controller holds the window")
            let mirror = ResultsMirror(
                try Self.subscribeResult(of: controller), request: request, sectionKeyPath: section)
            try await mirror.assertMatchesFreshFetch(writer)
            controllers.append(controller)
            logs.append(log)
            streams.append(controller.changes())
            mirrors.append(mirror)
        }
        var generator = SeededGenerator(seed: 1515)
        var counter = 0
        var pushedOrPulled = 0
        var changeSets = [0, 0]
        for step in 0..<60 {
            let params = FetchedResultsTests.randomTeamSave(ids: ids, counter: &counter, using: &generator)
            // Every fifth save comes from another process.
            let result =
                step % 5 == 0
                ? try daemon.saveFromAnotherProcess(params) : try await writer.call(StoreSave.self, params)
            ids = Array(Set(ids).union(result.versions.keys).subtracting(params.deleted.map(\.id)))
            let touched = Set(params.updated.map(\.id) + params.deleted.map(\.id) + result.ids.values)
            for index in controllers.indices {
                while !(try await mirrors[index].matchesFreshFetch(writer)) {
                    guard let changeSet = await ClientSupport.first(streams[index]) else {
                        return XCTFail("step \(step): no change reached controller \(index)")
                    }
                    XCTAssertFalse(changeSet.isReload, "no resync was needed")
                    XCTAssertEqual(changeSet.transaction, result.transaction)
                    changeSets[index] += 1
                    pushedOrPulled += changeSet.objectChanges.filter { !touched.contains($0.id) }.count
                    mirrors[index].apply(changeSet.wire(subscription: mirrors[index].subscription))
                }
                try await mirrors[index].assertMatchesFreshFetch(writer)
                // The controller itself shows the fresh window, values included.
                let fresh = try await mirrors[index].freshSections(writer)
                XCTAssertEqual(
                    controllers[index].layout?.sections.map(\.ids),
                    fresh.map { $0.objects.compactMap { $0["id"]?.stringValue } }, "step \(step)")
                XCTAssertEqual(
                    controllers[index].fetchedObjects?.map(\.json), fresh.flatMap(\.objects), "step \(step)")
            }
        }
        XCTAssertGreaterThan(
            pushedOrPulled, 10, "saves elsewhere pushed objects out of the windows and pulled others in")
        for index in controllers.indices {
            XCTAssertGreaterThan(changeSets[index], 5)
            XCTAssertEqual(logs[index].changeBatches.count, changeSets[index], "one will/did cycle per change")
            XCTAssertEqual(logs[index].reloadCount, 0)
            XCTAssertLessThanOrEqual(controllers[index].fetchedIDs.count, setups[index].0.fetchLimit)
        }
    }

    /// Batch faulting in a window: `results/objects` offsets are the window's.
    @MainActor
    func testBatchFaultingLoadsTheWindowsObjects() async throws {
        let daemon = try Daemon()
        defer { daemon.stop() }
        let connection = try await daemon.connect()
        try await connection.loadItems(300)
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: FetchRequest(
                entity: "Item", sortDescriptors: [SortDescriptor(key: "name")], fetchLimit: 50, fetchOffset: 100,
                fetchBatchSize: 10),
            connection: connection)
        try await controller.performFetch()
        XCTAssertEqual(controller.fetchedIDs.count, 50)
        XCTAssertEqual(controller.object(at: IndexPath(item: 0, section: 0)).string("name"), "item 100")
        XCTAssertEqual(controller.object(at: IndexPath(item: 37, section: 0)).string("name"), "item 137")
        try await controller.loadObjects(at: (20..<30).map { IndexPath(item: $0, section: 0) })
        XCTAssertEqual(controller.object(at: IndexPath(item: 25, section: 0)).string("name"), "item 125")
        XCTAssertEqual(
            controller.fetchedObjects?.map { $0.string("name")! }, (100..<150).map { String(format: "item %03d", $0) })
        // A delete before the window pulls the next object in at the end and shifts the rest.
        let changes = controller.changes()
        let found = try await connection.call(
            StoreFetch.self, FetchRequest(entity: "Item", predicate: "name == 'item 000'"))
        let first = try XCTUnwrap(found.objects?.first?["id"]?.stringValue)
        _ = try await connection.call(StoreSave.self, .init(deleted: [DeletedObject(id: first)]))
        let changeSet = await ClientSupport.first(changes)
        XCTAssertEqual(
            changeSet?.objectChanges.map(\.type).sorted { "\($0)" < "\($1)" }, [.delete, .insert],
            "item 100 leaves at the top, item 150 enters at the bottom")
        XCTAssertEqual(
            controller.fetchedObjects?.map { $0.string("name")! }, (101..<151).map { String(format: "item %03d", $0) })
    }
}

extension FetchedResultsChangeSet where Object == DepotObject {
    /// The change set as the `results/didChange` it came from, for the delta oracle.
    func wire(subscription: String) -> ResultsDidChange.Parameters {
        ResultsDidChange.Parameters(
            subscription: subscription, seq: seq, transaction: transaction ?? 0,
            sections: sectionChanges.map {
                DepotProtocol.SectionChange(
                    type: $0.type == .insert ? .insert : .delete, index: $0.index, name: $0.name)
            },
            objects: objectChanges.map { change in
                let kind: DepotProtocol.ObjectChange.Kind =
                    switch change.type {
                    case .insert: .insert
                    case .delete: .delete
                    case .move: .move
                    case .update: .update
                    }
                return DepotProtocol.ObjectChange(
                    type: kind, indexPath: change.indexPath.map(Array.init),
                    newIndexPath: change.newIndexPath.map(Array.init), id: change.id,
                    object: change.type == .delete ? nil : change.object?.json)
            })
    }
}
