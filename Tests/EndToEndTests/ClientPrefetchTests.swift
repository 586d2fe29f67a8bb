import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import Observation
import XCTest

/// `relationshipKeyPathsForPrefetching` from the Swift client (DESIGN.md §5, §7):
/// a context's fetch registers the related objects, so a prefetched relationship
/// answers without a round trip; a controller keeps them live, and a renamed
/// team is an update of the match rows showing it, the new name in hand.
final class ClientPrefetchTests: XCTestCase {
    func testContextAndControllerFollowPrefetchedRelationships() async throws {
        let daemon = try Daemon()
        defer { XCTAssertEqual(daemon.stop(), 0) }
        let connection = try await daemon.connect(name: "app")
        defer { connection.abort() }
        let saved = try await Self.league(connection)
        var request = FetchRequest(entity: "Match", sortDescriptors: [SortDescriptor(key: "score")])
        request.relationshipKeyPathsForPrefetching = ["homeTeam.coach", "homeTeam.players"]
        XCTAssertEqual(request.prefetch, ["homeTeam.coach", "homeTeam.players"])

        let context = ObjectContext(connection: connection)
        let matches = try await context.fetch(request)
        XCTAssertEqual(matches.count, 3)
        // Answered from the context: the objects came with the fetch.
        let home = try XCTUnwrap(matches[0].relatedObject("homeTeam"))
        XCTAssertEqual(home.string("teamName"), "A")
        XCTAssertEqual(home.relatedObject("coach")?.string("name"), "Ana")
        XCTAssertEqual(home.relatedObjects("players")?.map { $0.string("name") }, ["P"])

        let controller = FetchedResultsController<DepotObject>(fetchRequest: request, connection: connection)
        let changes = controller.changes()
        try await controller.performFetch()
        let first = try XCTUnwrap(controller.fetchedObjects?.first)
        XCTAssertEqual(controller.relatedObject("homeTeam", of: first)?.string("teamName"), "A")

        _ = try await connection.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: saved.ids["a"]!, values: ["teamName": "Renamed"])]))
        let change = await ClientSupport.first(changes)
        let ids = Set(change?.objectChanges.map(\.id) ?? [])
        XCTAssertEqual(ids, [saved.ids["m0"]!, saved.ids["m2"]!])
        XCTAssertTrue(change?.objectChanges.allSatisfy { $0.type == .update } == true)
        XCTAssertEqual(controller.relatedObject("homeTeam", of: first)?.string("teamName"), "Renamed")
        await controller.unsubscribe()
    }

    /// A controller with a persistent store keeps the related objects in its file beside the rows,
    /// as the deltas leave them: with the daemon stopped, a new controller on the file answers a
    /// prefetched relationship (the renamed team) without a round trip.
    func testThePersistentStoreKeepsTheRelatedObjects() async throws {
        let daemon = try Daemon()
        let connection = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(2))
        defer { connection.abort() }
        let saved = try await Self.league(connection)
        var request = FetchRequest(entity: "Match", sortDescriptors: [SortDescriptor(key: "score")])
        request.relationshipKeyPathsForPrefetching = ["homeTeam.coach"]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-related-\(UUID()).sqlite")
        defer { try? FileManager.default.removeItem(at: file) }
        let live = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        let changes = live.changes()
        try await live.performFetch()
        // A rename (the related object changes) and a re-point (m1 now shows team a; b is no longer reached).
        _ = try await connection.call(
            StoreSave.self,
            .init(updated: [
                UpdatedObject(id: saved.ids["a"]!, values: ["teamName": "Renamed"]),
                UpdatedObject(id: saved.ids["m1"]!, values: ["homeTeam": .string(saved.ids["a"]!)]),
            ]))
        _ = await ClientSupport.first(changes)
        XCTAssertNil(live.relatedObject(withID: saved.ids["b"]!), "team b is no longer reached")
        await live.waitForPersistentStore()
        await live.unsubscribe()
        XCTAssertEqual(daemon.stop(), 0)

        let offline = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        try await offline.performFetch()
        XCTAssertNil(offline.subscription, "the daemon is away")
        let rows = try XCTUnwrap(offline.fetchedObjects)
        XCTAssertEqual(rows.map(\.id), ["m0", "m1", "m2"].map { saved.ids[$0]! })
        for row in rows {
            let home = offline.relatedObject("homeTeam", of: row)
            XCTAssertEqual(home?.string("teamName"), "Renamed", "from the file, as the deltas left it")
            XCTAssertEqual(home.flatMap { offline.relatedObject("coach", of: $0) }?.string("name"), "Ana")
        }
        XCTAssertNil(offline.relatedObject(withID: saved.ids["b"]!), "what left the graph left the file")
    }

    /// `ObservableResults` holds the related objects as observable values: a view reading a
    /// match's home team through it is told when the team is renamed.
    @MainActor
    func testObservableResultsFollowPrefetchedRelationships() async throws {
        let daemon = try Daemon()
        defer { XCTAssertEqual(daemon.stop(), 0) }
        let connection = try await daemon.connect(name: "app")
        defer { connection.abort() }
        let saved = try await Self.league(connection)
        var request = FetchRequest(entity: "Match", sortDescriptors: [SortDescriptor(key: "score")])
        request.relationshipKeyPathsForPrefetching = ["homeTeam.players"]
        let results = ObservableResults<DepotObject>(fetchRequest: request, connection: connection)
        try await results.performFetch()
        let match = try XCTUnwrap(results.objects.first)
        let home = try XCTUnwrap(results.relatedObject("homeTeam", of: match))
        XCTAssertEqual(home.string("teamName"), "A")
        XCTAssertEqual(results.relatedObjects("players", of: home)?.map { $0.string("name") }, ["P"])

        let (changed, signal) = AsyncStream.makeStream(of: Void.self)
        withObservationTracking {
            _ = results.relatedObject("homeTeam", of: match)
        } onChange: {
            signal.yield()
        }
        _ = try await connection.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: saved.ids["a"]!, values: ["teamName": "Renamed"])]))
        let heard: Void? = await ClientSupport.first(changed, timeout: .seconds(20))
        XCTAssertNotNil(heard, "the rename was observed")
        // The change is published once the controller applied it.
        let deadline = ContinuousClock.now + .seconds(10)
        while results.relatedObject("homeTeam", of: match)?.string("teamName") != "Renamed",
            ContinuousClock.now < deadline
        {
            try await Task.sleep(for: .milliseconds(10))
        }
        XCTAssertEqual(results.relatedObject("homeTeam", of: match)?.string("teamName"), "Renamed")
        await results.controller.unsubscribe()
    }

    /// Defines the league model and saves a coach, teams a (coached, with a player) and b, and
    /// matches m0 and m2 at home to a, m1 to b; returns the save's answer (ids by temporary id).
    private static func league(_ connection: DepotConnection) async throws -> StoreSave.Result {
        _ = try await connection.call(ModelDefine.self, .init(entities: PrefetchFixture.entities))
        return try await connection.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Coach", tempId: "c", values: ["name": "Ana"]),
                InsertedObject(entity: "Team", tempId: "a", values: ["teamName": "A", "zone": "Z", "coach": "c"]),
                InsertedObject(entity: "Team", tempId: "b", values: ["teamName": "B", "zone": "Z"]),
                InsertedObject(entity: "Player", values: ["name": "P", "team": "a"]),
                InsertedObject(entity: "Match", tempId: "m0", values: ["round": "R", "score": 0, "homeTeam": "a"]),
                InsertedObject(entity: "Match", tempId: "m1", values: ["round": "R", "score": 1, "homeTeam": "b"]),
                InsertedObject(entity: "Match", tempId: "m2", values: ["round": "R", "score": 2, "homeTeam": "a"]),
            ]))
    }
}
