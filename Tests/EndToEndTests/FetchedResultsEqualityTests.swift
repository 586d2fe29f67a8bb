import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Sets filed by an equality term (`wins == 3`, `qualifyingZone == 'Asia' AND …`)
/// are offered only the changed rows of their value and those they held:
/// random saves that move teams between values keep every such subscription
/// equal to a fresh fetch, and untouched values hear nothing. Midway some values'
/// last subscribers leave and come back (their filing is dropped and made anew).
final class FetchedResultsEqualityTests: XCTestCase {
    func testFiledSetsFollowRowsMovingBetweenValues() async throws {
        let daemon = try Daemon()
        let watcher = try await daemon.connect(name: "watcher")
        let writer = try await daemon.connect(name: "writer")
        var ids = Array(try await writer.loadWorldCup().values)
        let collector = ChangeCollector(watcher)
        let byName = [SortDescriptor(key: "teamName")]
        var requests: [(FetchRequest, String?)] = (0...5).map {
            (FetchRequest(entity: "Team", predicate: "wins == \($0)", sort: byName), nil)
        }
        for zone in FetchedResultsTests.zones.prefix(4) {
            requests.append((FetchRequest(entity: "Team", predicate: "qualifyingZone == '\(zone)'", sort: byName), nil))
        }
        requests.append(
            (
                FetchRequest(
                    entity: "Team", predicate: "wins == 2 AND qualifyingZone != 'Europe'",
                    sort: [SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "teamName")]), "qualifyingZone"
            ))
        requests.append(
            (FetchRequest(entity: "Team", predicate: "%@ == wins", arguments: [1], sort: byName, limit: 3), nil))
        var mirrors: [ResultsMirror] = []
        for (request, section) in requests {
            let result = try await watcher.call(
                ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
            mirrors.append(ResultsMirror(result, request: request, sectionKeyPath: section))
        }
        var generator = SeededGenerator(seed: 12)
        var counter = 0
        var applied = [Int](repeating: 0, count: mirrors.count)
        for round in 0..<150 {
            if round == 50 || round == 100 {
                for index in stride(from: round / 50 - 1, to: 6, by: 2) {
                    _ = try await watcher.call(
                        ResultsUnsubscribe.self, .init(subscription: mirrors[index].subscription))
                    let (request, section) = requests[index]
                    let result = try await watcher.call(
                        ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
                    mirrors[index] = ResultsMirror(result, request: request, sectionKeyPath: section)
                    try await mirrors[index].assertMatchesFreshFetch(watcher)
                }
            }
            let params = FetchedResultsTests.randomTeamSave(ids: ids, counter: &counter, using: &generator)
            let result = try await writer.call(StoreSave.self, params)
            ids = Array(Set(ids).union(result.versions.keys).subtracting(params.deleted.map(\.id)))
            for index in mirrors.indices {
                if try await mirrors[index].matchesFreshFetch(watcher) { continue }
                let change = try await collector.expect(for: mirrors[index].subscription)
                XCTAssertEqual(change.transaction, result.transaction)
                mirrors[index].apply(change)
                applied[index] += 1
                try await mirrors[index].assertMatchesFreshFetch(watcher)
            }
        }
        // Every value's set moved: teams changed wins and zones throughout.
        XCTAssertTrue(applied.prefix(6).allSatisfy { $0 > 5 }, "\(applied)")
        // Nothing owed anywhere: no notification beyond those applied.
        try await Task.sleep(for: .milliseconds(200))
        for mirror in mirrors {
            let late = await collector.next(for: mirror.subscription, timeout: .milliseconds(20))
            XCTAssertNil(late, "a notification no change explains")
        }
    }
}
