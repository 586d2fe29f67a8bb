import DepotClient
import DepotTestSupport
import Foundation
import Observation
import XCTest

/// Observation in the Swift client (DESIGN.md §9) against real daemons: the connection's state is
/// an `AsyncSequence`, and `ObservableResults` changes under `withObservationTracking`.
final class ClientObservationTests: XCTestCase {
    func testConnectionStatesFollowADaemonStopAndRestart() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let connection = try await first.connect()
        XCTAssertEqual(connection.state, .connected)
        let states = connection.connectionStates()
        let seen = Task { () -> [ConnectionState] in
            var seen: [ConnectionState] = []
            for await state in states {
                seen.append(state)
                if seen.count > 1 && state == .connected { break }
            }
            return seen
        }
        XCTAssertEqual(first.stop(), 0)
        let disconnected = await ClientSupport.first(connection.connectionStates(), timeout: .seconds(20)) {
            $0 == .disconnected || $0 == .reconnecting
        }
        XCTAssertNotNil(disconnected, "the stop was noticed")
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(30))
            seen.cancel()
        }
        let sequence = await seen.value
        timeout.cancel()
        XCTAssertEqual(sequence, [.connected, .disconnected, .reconnecting, .connected])
        XCTAssertEqual(connection.state, .connected)
        let history = try await connection.call(StoreHistory.self, .init(since: 0))
        XCTAssertEqual(history.latest, 0, "calls work again")
    }

    @MainActor
    func testObservationTrackingSeesEachChangeOfObservableResults() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        try await ClientSupport.requireFetchedResults(connection)
        let ids = try await connection.loadWorldCup()
        let results = ObservableResults<DepotObject>(
            fetchRequest: ClientFetchedResultsTests.teamsRequest(batchSize: 8), connection: connection,
            sectionNameKeyPath: "qualifyingZone")
        XCTAssertFalse(results.isFetched)
        try await results.performFetch()
        XCTAssertTrue(results.isFetched)
        XCTAssertEqual(results.sections.map(\.name), ["Africa", "Asia", "Europe", "North America", "South America"])
        XCTAssertEqual(results.sections.map(\.numberOfObjects), [5, 4, 13, 4, 6])
        XCTAssertEqual(results.objects.count, 32, "every object loaded, batch by batch")

        let other = try await daemon.connect(name: "other")
        let saves: [(StoreSave.Parameters, @MainActor () -> Void)] = [
            (
                .init(updated: [UpdatedObject(id: ids["Brazil"]!, values: ["wins": 99])]),
                {
                    XCTAssertEqual(results.sections[4].objects.first?.string("teamName"), "Brazil")
                    XCTAssertEqual(results.sections[4].objects.first?.int("wins"), 99)
                }
            ),
            (
                .init(inserted: [
                    InsertedObject(entity: "Team", values: ["teamName": "Penguins", "qualifyingZone": "Antarctica"])
                ]),
                {
                    XCTAssertEqual(results.sections.map(\.name).prefix(2), ["Africa", "Antarctica"])
                    XCTAssertEqual(results.objects.count, 33)
                }
            ),
            (
                .init(deleted: [DeletedObject(id: ids["Japan"]!)]),
                {
                    XCTAssertEqual(results.sections.first { $0.name == "Asia" }?.numberOfObjects, 3)
                    XCTAssertFalse(results.objects.contains { $0.id == ids["Japan"] })
                }
            ),
        ]
        for (index, (save, check)) in saves.enumerated() {
            let (changed, signal) = AsyncStream.makeStream(of: Void.self)
            withObservationTracking {
                _ = results.sections
            } onChange: {
                signal.yield()
            }
            _ = try await other.call(StoreSave.self, save)
            let heard = await ClientSupport.first(changed, timeout: .seconds(20))
            XCTAssertNotNil(heard, "change \(index) was observed")
            check()
        }
    }
}
