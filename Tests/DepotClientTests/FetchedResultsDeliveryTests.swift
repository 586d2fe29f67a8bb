import Foundation
import Synchronization
import XCTest

@testable import DepotClient

/// Records every delegate call, with what the controller showed at that moment.
/// Main-actor isolated, as the delegate protocol is.
final class RecordingDelegate: FetchedResultsControllerDelegate {
    var calls: [String] = []

    func controllerWillChangeContent(_ controller: any FetchedResultsControlling) {
        calls.append("will \(controller.fetchedIDs)")
    }

    func controller(
        _ controller: any FetchedResultsControlling, didChange sectionInfo: any FetchedResultsSectionInfo,
        atSectionIndex sectionIndex: Int,
        for type: FetchedResultsChangeType
    ) {
        calls.append("section \(type) \(sectionIndex) \(sectionInfo.name) \(sectionInfo.numberOfObjects)")
    }

    func controller(
        _ controller: any FetchedResultsControlling, didChange anObject: Any, at indexPath: IndexPath?,
        for type: FetchedResultsChangeType,
        newIndexPath: IndexPath?
    ) {
        let object = anObject as? DepotObject
        calls.append(
            "object \(type) \(object?.id ?? "?") \(indexPath.map { Array($0) } ?? []) \(newIndexPath.map { Array($0) } ?? []) \(object?.int("wins") ?? -1)"
        )
    }

    func controllerDidChangeContent(_ controller: any FetchedResultsControlling) {
        calls.append("did \(controller.fetchedIDs)")
    }

    func controller(_ controller: any FetchedResultsControlling, didChangeContentWith snapshot: FetchedResultsSnapshot)
    {
        calls.append("snapshot \(snapshot.sectionIdentifiers)")
    }
}

final class FetchedResultsDeliveryTests: XCTestCase {
    private func team(_ number: Int, _ zone: String, wins: Int) -> DepotObject {
        DepotObject(
            id: "Team/\(number)", entity: "Team", version: 1,
            values: ["qualifyingZone": .string(zone), "wins": .int(Int64(wins))])
    }

    @MainActor
    private func makeController() throws -> (FetchedResultsController<DepotObject>, RecordingDelegate) {
        let connection = try DepotConnection.unconnected(to: "inproc://nobody-\(UUID().uuidString)")
        let request = FetchRequest(
            entity: "Team",
            sortDescriptors: [SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false)])
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone")
        let objects = [team(1, "Asia", wins: 3), team(2, "Asia", wins: 1), team(3, "Oceania", wins: 0)]
        controller.install(
            subscription: "s1",
            layout: ResultsLayout(sections: [
                .init(name: "Asia", ids: ["Team/1", "Team/2"]), .init(name: "Oceania", ids: ["Team/3"]),
            ]),
            objects: objects)
        let delegate = RecordingDelegate()
        controller.delegate = delegate
        return (controller, delegate)
    }

    @MainActor
    func testCallbacksComeInTableViewOrderWithTheNewResultsVisible() async throws {
        let (controller, delegate) = try makeController()
        let changes = controller.changes()
        let change = ResultsDidChange.Parameters(
            subscription: "s1", seq: 1, transaction: 5,
            sections: [
                SectionChange(type: .insert, index: 0, name: "Africa"),
                SectionChange(type: .delete, index: 1, name: "Oceania"),
            ],
            objects: [
                ObjectChange(type: .delete, indexPath: [1, 0], id: "Team/3"),
                ObjectChange(
                    type: .insert, newIndexPath: [0, 0], id: "Team/4", object: team(4, "Africa", wins: 2).json),
                ObjectChange(
                    type: .move, indexPath: [0, 1], newIndexPath: [1, 0], id: "Team/2",
                    object: team(2, "Asia", wins: 9).json),
            ])
        await controller.handle(
            .notification(ServerNotification(method: ResultsDidChange.name, params: try JSONCoding.encode(change))))
        XCTAssertEqual(
            delegate.calls,
            [
                "will [\"Team/1\", \"Team/2\", \"Team/3\"]",
                "section delete 1 Oceania 0",
                "section insert 0 Africa 1",
                "object delete Team/3 [1, 0] [] 0",
                "object insert Team/4 [] [0, 0] 2",
                "object move Team/2 [0, 1] [1, 0] 9",
                "did [\"Team/4\", \"Team/2\", \"Team/1\"]",
                "snapshot [\"Africa\", \"Asia\"]",
            ])
        XCTAssertEqual(controller.sections?.map(\.name), ["Africa", "Asia"])
        XCTAssertEqual(controller.object(at: IndexPath(item: 0, section: 1)).int("wins"), 9)
        XCTAssertEqual(controller.indexPath(forID: "Team/1"), IndexPath(item: 1, section: 1))
        XCTAssertNil(controller.indexPath(forID: "Team/3"))
        XCTAssertEqual(controller.sectionIndexTitles, ["A"])
        XCTAssertEqual(controller.section(forSectionIndexTitle: "A", at: 0), 0)

        var iterator = changes.makeAsyncIterator()
        let changeSet = await iterator.next()
        XCTAssertEqual(changeSet?.seq, 1)
        XCTAssertEqual(changeSet?.isReload, false)
        XCTAssertEqual(changeSet?.objectChanges.map(\.type), [.delete, .insert, .move])
        XCTAssertEqual(changeSet?.snapshot.itemIdentifiers(inSection: "Asia"), ["Team/2", "Team/1"])
    }

    @MainActor
    func testNotificationsOfOtherSubscriptionsAndOldSeqsChangeNothingVisible() async throws {
        let (controller, delegate) = try makeController()
        let other = ResultsDidChange.Parameters(
            subscription: "s2", seq: 1, transaction: 5, sections: [],
            objects: [
                ObjectChange(type: .delete, indexPath: [0, 0], id: "Team/1")
            ])
        await controller.handle(
            .notification(ServerNotification(method: ResultsDidChange.name, params: try JSONCoding.encode(other))))
        XCTAssertEqual(delegate.calls, [])
        XCTAssertEqual(controller.fetchedIDs, ["Team/1", "Team/2", "Team/3"])

        // A seq the layout already counts (it came from a later snapshot) only refreshes values.
        controller.install(
            subscription: "s1", layout: ResultsLayout(seq: 3, sections: controller.layout!.sections), objects: [])
        let old = ResultsDidChange.Parameters(
            subscription: "s1", seq: 2, transaction: 5, sections: [],
            objects: [
                ObjectChange(
                    type: .update, indexPath: [0, 0], newIndexPath: [0, 0], id: "Team/1",
                    object: team(1, "Asia", wins: 4).json)
            ])
        await controller.handle(
            .notification(ServerNotification(method: ResultsDidChange.name, params: try JSONCoding.encode(old))))
        XCTAssertEqual(delegate.calls, [])
        XCTAssertEqual(controller.layout?.seq, 3)
        XCTAssertEqual(controller.object(at: IndexPath(item: 0, section: 0)).int("wins"), 4)
    }

    @MainActor
    func testTypedObjectsAreDecoded() async throws {
        struct Team: Decodable, FetchRequestResult, Equatable {
            var id: String
            var qualifyingZone: String
            var wins: Int
        }
        let connection = try DepotConnection.unconnected(to: "inproc://nobody-\(UUID().uuidString)")
        let controller = FetchedResultsController<Team>(
            fetchRequest: FetchRequest(entity: "Team", sortDescriptors: [SortDescriptor(key: "wins")]),
            connection: connection)
        controller.install(
            subscription: "s1", layout: ResultsLayout(sections: [.init(name: "", ids: ["Team/1"])]),
            objects: [team(1, "Asia", wins: 3)])
        XCTAssertEqual(controller.fetchedObjects, [Team(id: "Team/1", qualifyingZone: "Asia", wins: 3)])
        XCTAssertEqual(
            controller.indexPath(forObject: Team(id: "Team/1", qualifyingZone: "", wins: 0)),
            IndexPath(item: 0, section: 0))
    }
}
