import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// `ObjectContext.count(for:)` and `fetchDictionaries(_:)` with a persistent store while the daemon
/// is stopped (DESIGN.md §9): answered from the file as the daemon would have answered them; a
/// grouped request is refused with an error that says why.
final class ClientOfflineReadsTests: XCTestCase {
    func testCountAndDictionariesAreAnsweredFromTheFileAndGroupedFetchesAreRefused() async throws {
        let daemon = try Daemon(heartbeat: 1)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-context-\(UUID()).sqlite")
        defer { try? FileManager.default.removeItem(at: file) }
        let connection = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(5))
        let ids = try await connection.loadWorldCup()
        _ = try await connection.call(
            StoreSave.self,
            .init(updated: [
                UpdatedObject(id: ids["Germany"]!, values: ["wins": 3]),
                UpdatedObject(id: ids["France"]!, values: ["wins": 2]),
                UpdatedObject(id: ids["Spain"]!, values: ["wins": 1]),
            ]))
        let context = try ObjectContext(connection: connection, persistentStore: file)
        _ = try await context.fetch(FetchRequest(entity: "Team"))

        // The same requests, asked of the daemon and then of the file.
        let requests = [
            FetchRequest(entity: "Team", sortDescriptors: []),
            FetchRequest(
                entity: "Team", predicate: "qualifyingZone == %@ AND wins >= %@", arguments: ["Europe", 1],
                sortDescriptors: [SortDescriptor(key: "wins", ascending: false), SortDescriptor(key: "teamName")]),
            FetchRequest(
                entity: "Team", predicate: "teamName BEGINSWITH 'S'",
                sortDescriptors: [SortDescriptor(key: "teamName")], fetchLimit: 3, fetchOffset: 1),
        ]
        var online: [(count: Int, dictionaries: [[String: JSONValue]])] = []
        for var request in requests {
            request.properties = ["teamName", "wins"]
            online.append((try await context.count(for: request), try await context.fetchDictionaries(request)))
        }
        // Three European teams with wins; three teams whose names begin with S, one skipped.
        XCTAssertEqual(online.map(\.count), [32, 3, 2])
        XCTAssertEqual(online.map(\.dictionaries.count), [32, 3, 2])
        XCTAssertEqual(online[1].dictionaries.map { $0["teamName"] }, ["Germany", "France", "Spain"])

        let states = connection.connectionStates()
        XCTAssertEqual(daemon.stop(), 0)
        _ = await ClientSupport.first(states, timeout: .seconds(20)) { $0 != .connected }
        XCTAssertNotEqual(connection.state, .connected)
        for (index, var request) in requests.enumerated() {
            request.properties = ["teamName", "wins"]
            let count = try await context.count(for: request)
            XCTAssertEqual(count, online[index].count, "count of request \(index) from the file")
            let dictionaries = try await context.fetchDictionaries(request)
            if request.sort?.isEmpty == false {
                XCTAssertEqual(dictionaries, online[index].dictionaries, "dictionaries of request \(index)")
            } else {
                XCTAssertEqual(Set(dictionaries), Set(online[index].dictionaries), "dictionaries of request \(index)")
            }
        }

        // fetch(_:) answers objects only; the other result types have their own calls.
        do {
            _ = try await context.fetch(FetchRequest(entity: "Team", resultType: .ids))
            XCTFail("an ids fetch was answered offline as objects")
        } catch {
            guard case .persistentStore(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("count(for:)"), message)
        }

        // Groups are the daemon's to compute: refused, saying so.
        var grouped = FetchRequest(entity: "Team")
        grouped.groupBy = ["qualifyingZone"]
        do {
            _ = try await context.fetchDictionaries(grouped)
            XCTFail("a grouped fetch was answered offline")
        } catch {
            guard case .persistentStore(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("grouped"), message)
        }
        do {
            _ = try await context.count(for: grouped)
            XCTFail("a grouped count was answered offline")
        } catch {
            guard case .persistentStore(let message) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("grouped"), message)
        }
    }
}
