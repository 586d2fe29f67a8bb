import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Live windows (DESIGN.md §7): `request.limit`/`offset` on a subscription
/// keep a window whose deltas, applied by the §7 rule, give exactly a fresh
/// fetch with the same limit and offset, including objects pushed out of the
/// window (deletes) and pulled into it (inserts with values) by changes elsewhere.
final class FetchedResultsWindowTests: XCTestCase {
    func testWindowsFollowRandomTransactionsExactly() async throws {
        let daemon = try Daemon()
        let watcher = try await daemon.connect(name: "watcher")
        let writer = try await daemon.connect(name: "writer")
        var ids = Array(try await writer.loadWorldCup().values)
        let collector = ChangeCollector(watcher)
        let byWins = [SortDescriptor(key: "wins", ascending: false), SortDescriptor(key: "teamName")]
        let requests: [(FetchRequest, String?)] = [
            (FetchRequest(entity: "Team", sort: byWins, limit: 5), nil),
            (
                FetchRequest(entity: "Team", sort: FetchedResultsTests.byZone.sort, limit: 8, offset: 6),
                "qualifyingZone"
            ),
            (FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")], offset: 25), nil),
            (FetchRequest(entity: "Team", predicate: "wins >= 2", sort: byWins, limit: 3, offset: 1), "wins"),
        ]
        var mirrors: [ResultsMirror] = []
        for (request, section) in requests {
            let result = try await watcher.call(
                ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
            XCTAssertLessThanOrEqual(result.count, request.limit ?? .max, "count is the window's")
            let mirror = ResultsMirror(result, request: request, sectionKeyPath: section)
            try await mirror.assertMatchesFreshFetch(watcher)
            mirrors.append(mirror)
        }
        var generator = SeededGenerator(seed: 15)
        var counter = 0
        var pushedOrPulled = 0
        for _ in 0..<150 {
            let params = FetchedResultsTests.randomTeamSave(ids: ids, counter: &counter, using: &generator)
            let result = try await writer.call(StoreSave.self, params)
            ids = Array(Set(ids).union(result.versions.keys).subtracting(params.deleted.map(\.id)))
            let touched = Set(params.updated.map(\.id) + params.deleted.map(\.id) + result.ids.values)
            for index in mirrors.indices {
                if try await mirrors[index].matchesFreshFetch(watcher) { continue }
                let change = try await collector.expect(for: mirrors[index].subscription)
                XCTAssertEqual(change.transaction, result.transaction)
                // Objects the save did not touch that entered or left the window.
                pushedOrPulled += change.objects.filter { !touched.contains($0.id) }.count
                mirrors[index].apply(change)
                try await mirrors[index].assertMatchesFreshFetch(watcher)
            }
        }
        XCTAssertGreaterThan(pushedOrPulled, 10, "changes elsewhere pushed objects out of windows and pulled others in")
        XCTAssertGreaterThan(mirrors[0].seq, 10)

        // results/snapshot and results/objects speak of the window.
        let snapshot = try await watcher.call(ResultsSnapshot.self, .init(subscription: mirrors[1].subscription))
        XCTAssertEqual(snapshot.ids, mirrors[1].sections.flatMap(\.objects).compactMap { $0["id"]?.stringValue })
        XCTAssertEqual(snapshot.sections.reduce(0) { $0 + $1.count }, 8)
        let page = try await watcher.call(
            ResultsObjects.self, .init(subscription: mirrors[1].subscription, offset: 6, length: 10))
        XCTAssertEqual(page.objects, Array(mirrors[1].sections.flatMap(\.objects).dropFirst(6)))
    }
}
