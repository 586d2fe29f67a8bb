import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Coalescing (DESIGN.md §7): with `coalesceMs`, the transactions of a window
/// arrive as one `results/didChange` carrying `transactions: [first, last]`,
/// whose deltas take the results from before `first` to after `last` under
/// the same apply rule, checked against a fresh fetch after every burst.
final class FetchedResultsCoalescingTests: XCTestCase {
    func testBurstsFoldIntoOneExactNotification() async throws {
        let daemon = try Daemon()
        let watcher = try await daemon.connect(name: "watcher")
        let writer = try await daemon.connect(name: "writer")
        var ids = Array(try await writer.loadWorldCup().values)
        let collector = ChangeCollector(watcher)
        let byWins = [SortDescriptor(key: "wins", ascending: false), SortDescriptor(key: "teamName")]
        let requests: [(FetchRequest, String?)] = [
            (FetchedResultsTests.byZone, "qualifyingZone"),
            (FetchRequest(entity: "Team", sort: byWins), "wins"),
            (FetchRequest(entity: "Team", sort: byWins, limit: 6, offset: 2), nil),
        ]
        var mirrors: [ResultsMirror] = []
        for (request, section) in requests {
            let result = try await watcher.call(
                ResultsSubscribe.self,
                .init(request: request, sectionKeyPath: section, include: .all, coalesceMs: 150))
            mirrors.append(ResultsMirror(result, request: request, sectionKeyPath: section))
        }
        var generator = SeededGenerator(seed: 60)
        var counter = 0
        var transactionsSaved = 0
        var notifications = 0
        var folded = 0
        var covered = [Int64](repeating: 0, count: mirrors.count)
        for _ in 0..<12 {
            var last: Int64 = 0
            for _ in 0..<Int.random(in: 2...8, using: &generator) {
                let params = FetchedResultsTests.randomTeamSave(ids: ids, counter: &counter, using: &generator)
                let result = try await writer.call(StoreSave.self, params)
                ids = Array(Set(ids).union(result.versions.keys).subtracting(params.deleted.map(\.id)))
                last = max(last, result.transaction)
                transactionsSaved += 1
            }
            // Spans follow each other without overlap (a window may have opened in an earlier burst).
            func take(_ change: ResultsDidChange.Parameters, into index: Int) {
                notifications += 1
                let span = change.transactions ?? [change.transaction, change.transaction]
                XCTAssertEqual(span.count, 2)
                XCTAssertGreaterThan(span[0], covered[index])
                XCTAssertEqual(change.transaction, span[1])
                XCTAssertLessThanOrEqual(span[1], last)
                covered[index] = span[1]
                if change.transactions != nil {
                    XCTAssertLessThan(span[0], span[1])
                    folded += 1
                }
                mirrors[index].apply(change)
            }
            for index in mirrors.indices {
                // Everything the burst did arrives within the window (and a little scheduling slack).
                while !(try await mirrors[index].matchesFreshFetch(watcher)) {
                    take(
                        try await collector.expect(for: mirrors[index].subscription, timeout: .seconds(5)), into: index)
                }
            }
            // A window whose changes show nothing (a value set and set back: an update with the same
            // values) may still be open when the results already match: what it announces stays exact.
            try await Task.sleep(for: .milliseconds(200))
            for index in mirrors.indices {
                while let change = await collector.next(for: mirrors[index].subscription, timeout: .milliseconds(20)) {
                    take(change, into: index)
                }
                try await mirrors[index].assertMatchesFreshFetch(watcher)
            }
        }
        XCTAssertGreaterThan(folded, 5, "bursts were folded")
        XCTAssertLessThan(notifications, transactionsSaved * mirrors.count / 2, "fewer notifications than transactions")
        // Nothing more is owed: a last wait brings no further notification for any mirror.
        try await Task.sleep(for: .milliseconds(400))
        for mirror in mirrors {
            let late = await collector.next(for: mirror.subscription, timeout: .milliseconds(50))
            XCTAssertNil(late)
            try await mirror.assertMatchesFreshFetch(watcher)
        }
        // results/objects during an open window answers at a consistent seq.
        let burst = FetchedResultsTests.randomTeamSave(ids: ids, counter: &counter, using: &generator)
        _ = try await writer.call(StoreSave.self, burst)
        let page = try await watcher.call(
            ResultsObjects.self, .init(subscription: mirrors[0].subscription, offset: 0, length: 100))
        var mirror = mirrors[0]
        while mirror.seq < page.seq {
            mirror.apply(try await collector.expect(for: mirror.subscription))
        }
        XCTAssertEqual(page.objects, mirror.sections.flatMap(\.objects))
    }
}
