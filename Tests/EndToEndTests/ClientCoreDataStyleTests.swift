import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// The names a Core Data user types from memory, against a real daemon.
final class ClientCoreDataStyleTests: XCTestCase {
    /// A plain `Decodable` type: no `id`, no `FetchRequestResult`.
    struct PlainTeam: Decodable, Sendable, Equatable {
        var teamName: String
        var wins: Int?
    }

    func testCoreDataNamesInsertSetValueFetchCountAndObjectWith() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        let other = try await daemon.connect(name: "other")
        try await connection.loadWorldCup()
        let context = ObjectContext(connection: connection)

        var team = DepotObject.insertNewObject(forEntityName: "Team", into: context)
        let n = 7
        team.setValue("Atlantis-\(n)", forKey: "teamName")
        team.setValue("Ocean", forKey: "qualifyingZone")
        team.setValue(n, forKey: "wins")
        var second = context.insertNewObject(forEntityName: "Team")
        second["teamName"] = "Lemuria-\(n + 1)"  // an interpolated string is a JSONValue
        second["qualifyingZone"] = "Ocean"
        XCTAssertTrue(context.hasChanges)
        XCTAssertEqual(context.insertedObjects.count, 2)
        XCTAssertEqual(team.value(forKey: "teamName"), "Atlantis-7")
        let saved = try await context.save()
        let atlantisID = try XCTUnwrap(saved.ids[team.id])

        // NSPredicate-style: a format and ordinary Swift values.
        let zone = "Ocean"
        let request = FetchRequest(
            entityName: "Team", predicate: "qualifyingZone == %@ AND wins >= %d", zone, 7,
            sortDescriptors: [SortDescriptor(key: "teamName")])
        let fetched = try await ObjectContext(connection: other).fetch(request)
        XCTAssertEqual(fetched.map { $0.string("teamName") }, ["Atlantis-7"])
        let oceanCount = try await context.count(
            for: FetchRequest(entityName: "Team", predicate: "qualifyingZone == %@", zone))
        XCTAssertEqual(oceanCount, 2)

        // Identity in predicates, as Core Data's `self == %@`.
        for format in ["SELF == %@", "id == %@", "self IN %@"] {
            let argument: any JSONValueConvertible = format.hasSuffix("IN %@") ? [atlantisID] : atlantisID
            let byID = try await context.fetch(FetchRequest(entityName: "Team", predicate: format, argument))
            XCTAssertEqual(byID.map(\.id), [atlantisID], format)
        }

        // object(with:), then a typed fetch into a plain Decodable.
        let read = try await ObjectContext(connection: other).object(with: atlantisID)
        XCTAssertEqual(read?.int("wins"), 7)
        let plain = try await context.fetch(request, as: PlainTeam.self)
        XCTAssertEqual(plain, [PlainTeam(teamName: "Atlantis-7", wins: 7)])
    }

    func testPlainDecodableTypesInAFetchedResultsController() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let controller = FetchedResultsController<PlainTeam>(
            fetchRequest: FetchRequest(
                entityName: "Team", predicate: "qualifyingZone == %@", "South America",
                sortDescriptors: [SortDescriptor(key: "teamName")]),
            connection: connection)
        try await controller.performFetch()
        let first = controller.object(at: IndexPath(item: 0, section: 0))
        XCTAssertEqual(first.teamName, "Argentina")
        XCTAssertEqual(controller.objectID(at: IndexPath(item: 1, section: 0)), ids["Brazil"])
        XCTAssertEqual(controller.indexPath(forID: try XCTUnwrap(ids["Brazil"])), IndexPath(item: 1, section: 0))
        XCTAssertEqual(controller.fetchedObjects?.count, 6)
    }

    func testUniquenessErrorsReadAsProse() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await connection.loadWorldCup()
        let context = ObjectContext(connection: connection)
        var duplicate = context.insertNewObject(forEntityName: "Team")
        duplicate["teamName"] = "Brazil"
        duplicate["qualifyingZone"] = "South America"
        do {
            try await context.save()
            XCTFail("a second Brazil violates the uniqueness constraint")
        } catch {
            let message = error.rpcError?.message ?? ""
            XCTAssertTrue(message.contains("Team(teamName)"), message)
            XCTAssertFalse(message.contains("[\""), message)
        }
    }
}
