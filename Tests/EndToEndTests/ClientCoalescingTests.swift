import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Coalescing through ``FetchedResultsController`` (`coalescingInterval`, sent
/// as `coalesceMs`): a UI redrawing at 60 Hz under an importer hears one
/// will/did cycle per folded change, each exact under the delta oracle.
final class ClientCoalescingTests: XCTestCase {
    @MainActor
    func testAControllerUnderAnImporterHearsOneCyclePerFoldedChange() async throws {
        let daemon = try Daemon()
        defer { daemon.stop() }
        let viewer = try await daemon.connect(name: "ui")
        let importer = try await daemon.connect(name: "importer")
        var ids = Array(try await importer.loadWorldCup().values)
        let setups: [(FetchRequest, String?)] = [
            (FetchedResultsTests.byZone, "qualifyingZone"),
            (FetchRequest(entity: "Team", sortDescriptors: ClientWindowTests.byWins, fetchLimit: 10), nil),
        ]
        var controllers: [FetchedResultsController<DepotObject>] = []
        var logs: [CallLog] = []
        var streams: [AsyncStream<FetchedResultsChangeSet<DepotObject>>] = []
        var mirrors: [ResultsMirror] = []
        for (request, section) in setups {
            let controller = FetchedResultsController<DepotObject>(
                fetchRequest: request, connection: viewer, sectionNameKeyPath: section,
                coalescingInterval: .milliseconds(16))
            XCTAssertEqual(controller.coalescingInterval, .milliseconds(16))
            let log = CallLog()
            controller.delegate = log
            try await controller.performFetch()
            mirrors.append(
                ResultsMirror(
                    try ClientWindowTests.subscribeResult(of: controller), request: request, sectionKeyPath: section))
            controllers.append(controller)
            logs.append(log)
            streams.append(controller.changes())
        }
        // The importer: bursts of small transactions, 40 in flight at once (inserts and updates,
        // so their order does not matter), as fast as the daemon commits them.
        var generator = SeededGenerator(seed: 6060)
        var counter = 0
        var saved = 0
        var lastTransaction: Int64 = 0
        var changeSets: [[FetchedResultsChangeSet<DepotObject>]] = [[], []]
        for _ in 0..<6 {
            var burst: [StoreSave.Parameters] = []
            for _ in 0..<40 {
                var params = FetchedResultsTests.randomTeamSave(ids: ids, counter: &counter, using: &generator)
                params.deleted = []
                if !params.inserted.isEmpty || !params.updated.isEmpty { burst.append(params) }
            }
            let results = try await withThrowingTaskGroup(of: StoreSave.Result.self) { group in
                for params in burst { group.addTask { try await importer.call(StoreSave.self, params) } }
                var results: [StoreSave.Result] = []
                for try await result in group { results.append(result) }
                return results
            }
            for result in results {
                ids = Array(Set(ids).union(result.versions.keys))
                lastTransaction = max(lastTransaction, result.transaction)
            }
            saved += results.count
            for index in controllers.indices {
                while !(try await mirrors[index].matchesFreshFetch(importer)) {
                    guard let changeSet = await ClientSupport.first(streams[index], timeout: .seconds(5)) else {
                        return XCTFail("controller \(index) did not catch up")
                    }
                    XCTAssertFalse(changeSet.isReload)
                    changeSets[index].append(changeSet)
                    mirrors[index].apply(changeSet.wire(subscription: mirrors[index].subscription))
                }
                // The controller shows what a fresh fetch shows.
                let fresh = try await mirrors[index].freshSections(importer)
                XCTAssertEqual(controllers[index].fetchedObjects?.map(\.json), fresh.flatMap(\.objects))
            }
        }
        // Nothing more is owed.
        try await Task.sleep(for: .milliseconds(200))
        for index in controllers.indices {
            while let late = await ClientSupport.first(streams[index], timeout: .milliseconds(50)) {
                XCTFail("a change after the results matched a fresh fetch: \(late.transactions.map { "\($0)" } ?? "")")
            }
        }
        for index in controllers.indices {
            let sets = changeSets[index]
            let spans = sets.compactMap(\.transactions)
            XCTAssertEqual(spans.count, sets.count, "every change says which transactions it covers")
            // Spans follow each other without overlap, and each ends with the change's transaction.
            for (earlier, later) in zip(spans, spans.dropFirst()) {
                XCTAssertLessThan(earlier.upperBound, later.lowerBound)
            }
            for set in sets { XCTAssertEqual(set.transaction, set.transactions?.upperBound) }
            XCTAssertLessThanOrEqual(spans.last?.upperBound ?? 0, lastTransaction)
            let folded = spans.filter { $0.count > 1 }.count
            XCTAssertGreaterThan(folded, 3, "controller \(index): bursts were folded")
            XCTAssertLessThan(sets.count, saved / 3, "controller \(index): \(sets.count) changes for \(saved) saves")
            // One will/did cycle per folded change, with one callback per object change.
            let batches = logs[index].changeBatches
            XCTAssertEqual(batches.count, sets.count, "one will/did cycle per change")
            for (batch, set) in zip(batches, sets) {
                XCTAssertEqual(batch.filter { $0.hasPrefix("object") }.count, set.objectChanges.count)
                XCTAssertEqual(batch.filter { $0.hasPrefix("section") }.count, set.sectionChanges.count)
            }
            XCTAssertEqual(logs[index].reloadCount, 0)
        }
    }
}
