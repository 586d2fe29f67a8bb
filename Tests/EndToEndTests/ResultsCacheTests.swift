import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// `cacheName`: ordered ids and sections survive restarts and are reused by
/// an identical subscription, which then only catches up with history.
final class ResultsCacheTests: XCTestCase {
    let request = FetchedResultsTests.byZone

    func testCacheSurvivesRestartsAndCatchesUp() async throws {
        let first = try Daemon()
        var client = try await first.connect()
        let ids = try await client.loadWorldCup()
        var result = try await client.call(
            ResultsSubscribe.self,
            .init(request: request, sectionKeyPath: "qualifyingZone", cacheName: "zones", include: .all))
        XCTAssertEqual(result.fromCache, false)
        _ = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Iran"]!, values: ["wins": 5])]))
        client.abort()
        XCTAssertEqual(first.stop(), 0)

        // Graceful restart: the cache was written at shutdown.
        let second = try Daemon(dataDirectory: first.dataDirectory)
        client = try await second.connect()
        result = try await client.call(
            ResultsSubscribe.self,
            .init(request: request, sectionKeyPath: "qualifyingZone", cacheName: "zones", include: .all))
        XCTAssertEqual(result.fromCache, true)
        var mirror = ResultsMirror(result, request: request, sectionKeyPath: "qualifyingZone")
        try await mirror.assertMatchesFreshFetch(client)
        let collector = ChangeCollector(client)
        _ = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Iran"]!, values: ["qualifyingZone": "Europe"])]))
        mirror.apply(try await collector.expect(for: mirror.subscription))
        try await mirror.assertMatchesFreshFetch(client)
        // Changes made while no one subscribes, then a crash: the cache is stale and catches up from history.
        _ = try await client.call(ResultsUnsubscribe.self, .init(subscription: result.subscription))
        _ = try await client.call(
            StoreSave.self,
            .init(
                inserted: [
                    InsertedObject(entity: "Team", values: ["teamName": "Narnia", "qualifyingZone": "Fiction"])
                ],
                deleted: [DeletedObject(id: ids["Ghana"]!)]))
        client.abort()
        second.stop(signal: SIGKILL)

        let third = try Daemon(dataDirectory: first.dataDirectory)
        client = try await third.connect()
        result = try await client.call(
            ResultsSubscribe.self,
            .init(request: request, sectionKeyPath: "qualifyingZone", cacheName: "zones", include: .all))
        XCTAssertEqual(result.fromCache, true)
        XCTAssertTrue(result.sections.map(\.name).contains("Fiction"))
        try await ResultsMirror(result, request: request, sectionKeyPath: "qualifyingZone").assertMatchesFreshFetch(
            client)

        // Another request under the same name rebuilds; deleteCache forgets it.
        var other = FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")])
        other.properties = ["teamName"]
        let rebuilt = try await client.call(
            ResultsSubscribe.self, .init(request: other, cacheName: "zones", include: .all))
        XCTAssertEqual(rebuilt.fromCache, false)
        _ = try await client.call(ResultsDeleteCache.self, .init(cacheName: "zones"))
        _ = try await client.call(ResultsUnsubscribe.self, .init(subscription: result.subscription))
        _ = try await client.call(ResultsUnsubscribe.self, .init(subscription: rebuilt.subscription))
        let fresh = try await client.call(
            ResultsSubscribe.self, .init(request: request, sectionKeyPath: "qualifyingZone", cacheName: "zones"))
        XCTAssertEqual(fresh.fromCache, false)
        third.stop()
        third.removeData()
    }
}
