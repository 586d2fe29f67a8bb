import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// Grouped fetches as a Core Data user writes them (`propertiesToGroupBy`,
/// expression descriptions, `havingPredicate`), against a real daemon with the
/// World Cup teams, held to groups computed from the fetched objects.
final class ClientGroupedFetchTests: XCTestCase {
    /// One zone's row, decoded from its dictionary by the streamed fetch.
    struct ZoneWins: Decodable, Sendable, Equatable {
        var qualifyingZone: String
        var teams: Int
        var wins: Int
    }

    func testWinsPerZoneThroughTheContextTheStreamedFetchAndALiveController() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        _ = try await connection.loadWorldCup()
        // Wins that differ: 2 for the teams whose name starts with S, 5 more across Asia.
        _ = try await connection.call(
            BatchUpdate.self, .init(entity: "Team", predicate: "teamName BEGINSWITH 'S'", values: ["wins": 2]))
        _ = try await connection.call(
            BatchUpdate.self, .init(entity: "Team", predicate: "qualifyingZone == 'Asia'", values: ["wins": 5]))
        let context = ObjectContext(connection: connection)
        let teams = try await context.fetch(FetchRequest(entityName: "Team"))

        var request = FetchRequest(
            entityName: "Team", sortDescriptors: [SortDescriptor(key: "wins", ascending: false)])
        request.propertiesToGroupBy = ["qualifyingZone"]
        request.aggregates = [
            ExpressionDescription(name: "teams", function: .count),
            ExpressionDescription(name: "wins", function: .sum, key: "wins"),
        ]
        request.havingPredicate = "teams >= %d"
        request.arguments = [4]

        var expected: [String: (teams: Int, wins: Int)] = [:]
        for team in teams {
            let zone = try XCTUnwrap(team.string("qualifyingZone"))
            expected[zone, default: (0, 0)].teams += 1
            expected[zone, default: (0, 0)].wins += team.int("wins") ?? 0
        }
        let rows = expected.filter { $0.value.teams >= 4 }.map {
            ZoneWins(qualifyingZone: $0.key, teams: $0.value.teams, wins: $0.value.wins)
        }.sorted { ($0.wins, $1.qualifyingZone) > ($1.wins, $0.qualifyingZone) }
        XCTAssertEqual(rows.count, 5)
        XCTAssertEqual(rows.first?.qualifyingZone, "Asia")

        let dictionaries = try await context.fetchDictionaries(request)
        XCTAssertEqual(
            dictionaries,
            rows.map {
                [
                    "qualifyingZone": .string($0.qualifyingZone), "teams": .int(Int64($0.teams)),
                    "wins": .int(Int64($0.wins)),
                ]
            })
        // The streamed path (AsynchronousFetchRequest's) decodes each group.
        request.fetchBatchSize = 2
        let streamed = try await connection.fetch(request, as: ZoneWins.self)
        XCTAssertEqual(streamed, rows)
        // As DepotObject (which needs an id), refused with the reason.
        do {
            _ = try await connection.fetch(request)
            XCTFail("groups were made into DepotObjects")
        } catch {
            XCTAssertTrue("\(error)".contains("returns dictionaries, not objects"), "\(error)")
        }
        let count = try await context.count(for: request)
        XCTAssertEqual(count, 5, "store/count of a grouped request counts its groups")

        // Live: a FetchedResultsController over the groups, with the same delegate and change stream.
        let controller = FetchedResultsController<ZoneWins>(fetchRequest: request, connection: connection)
        try await controller.performFetch()
        XCTAssertEqual(controller.fetchedObjects, rows)
        // Every row has the id the daemon gave it (DESIGN.md §7), none computed here by the client.
        XCTAssertEqual(controller.fetchedIDs, rows.map { "group:[\"\($0.qualifyingZone)\"]" })
        let changes = controller.changes()
        // A European team moves to Africa and wins 20 more: two groups change, and Africa climbs to the top.
        let moved = try XCTUnwrap(
            teams.first { $0.string("qualifyingZone") == "Europe" && $0.string("teamName")?.hasPrefix("S") == false })
        _ = try await connection.call(
            StoreSave.self,
            .init(updated: [UpdatedObject(id: moved.id, values: ["qualifyingZone": "Africa", "wins": 20])]))
        let received = await ClientSupport.first(changes)
        let changeSet = try XCTUnwrap(received)
        XCTAssertEqual(Set(changeSet.objectChanges.map(\.id)), ["group:[\"Europe\"]", "group:[\"Africa\"]"])
        let fresh = try await connection.fetch(request, as: ZoneWins.self)
        XCTAssertEqual(controller.fetchedObjects, fresh, "the deltas applied give a fresh grouped fetch")
        XCTAssertEqual(controller.fetchedIDs, fresh.map { "group:[\"\($0.qualifyingZone)\"]" })
        XCTAssertEqual(fresh.first?.qualifyingZone, "Africa")
        XCTAssertEqual(controller.object(at: IndexPath(item: 0, section: 0)).wins, fresh.first?.wins)
        await controller.unsubscribe()
    }
}
