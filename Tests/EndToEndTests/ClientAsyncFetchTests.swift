import DepotClient
import Foundation
import Synchronization
import XCTest

/// AsynchronousFetchRequest: Progress follows the daemon's reports; cancel ends it with a cancellation error.
final class ClientAsyncFetchTests: XCTestCase {
    static let itemCount = 50_000

    private func daemonWithItems() async throws -> (Daemon, DepotConnection) {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        _ = try await connection.call(ModelDefine.self, .init(entities: [WorldCup.item]))
        for chunk in stride(from: 0, to: Self.itemCount, by: 5_000) {
            let items = (chunk..<chunk + 5_000).map { index in
                InsertedObject(
                    entity: "Item", values: ["name": .string("item \(index)"), "createdAt": "2026-01-01T00:00:00.000Z"])
            }
            _ = try await connection.call(StoreSave.self, .init(inserted: items), timeout: .seconds(120))
        }
        return (daemon, connection)
    }

    func testProgressReachesTheCountAndCancelEndsWithACancellationError() async throws {
        let (daemon, connection) = try await daemonWithItems()
        defer { daemon.stop() }
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "name")], batchSize: 500)

        let completions = Mutex(0)
        let running = try await connection.execute(
            AsynchronousFetchRequest(fetchRequest: request) { result in
                XCTAssertEqual(result.finalResult?.first?.string("name"), "item 0")  // DepotObject, inferred
                completions.withLock { $0 += 1 }
            })
        // Progress as an AsyncSequence (no key-value observing on Linux): it rises to the total, then finishes.
        var updates: [FetchProgress] = []
        for await update in running.progressUpdates { updates.append(update) }
        XCTAssertEqual(updates.last?.isFinished, true)
        XCTAssertEqual(updates.last?.total, Int64(Self.itemCount))
        XCTAssertEqual(updates.last?.completed, Int64(Self.itemCount))
        XCTAssertEqual(updates.last?.fractionCompleted, 1)
        XCTAssertEqual(updates.map(\.completed), updates.map(\.completed).sorted(), "completed never goes back")
        var afterwards: [FetchProgress] = []
        for await update in running.progressUpdates { afterwards.append(update) }
        XCTAssertEqual(afterwards, [updates.last!], "a late listener gets the final state and the end")
        let objects = try await running.value
        XCTAssertEqual(objects.count, Self.itemCount)
        XCTAssertEqual(running.progress.totalUnitCount, Int64(Self.itemCount))
        XCTAssertEqual(running.progress.completedUnitCount, Int64(Self.itemCount))
        XCTAssertEqual(running.finalResult?.count, Self.itemCount)
        XCTAssertNil(running.operationError)
        XCTAssertEqual(objects.first?.string("name"), "item 0")
        XCTAssertEqual(completions.withLock { $0 }, 1)

        // Cancel as soon as the daemon has counted (begin) and started reading.
        let cancelled = try await connection.execute(AsynchronousFetchRequest(fetchRequest: request))
        let deadline = ContinuousClock.now + .seconds(30)
        while cancelled.progress.totalUnitCount <= 0 && cancelled.result == nil && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(1))
        }
        cancelled.progress.cancel()
        do {
            _ = try await cancelled.value
            XCTFail("the fetch should have been cancelled")
        } catch {
            XCTAssertTrue(error.isCancellation, "\(error)")
        }
        XCTAssertTrue(cancelled.operationError?.isCancellation ?? false)
        XCTAssertNil(cancelled.finalResult)
        XCTAssertLessThan(cancelled.progress.completedUnitCount, Int64(Self.itemCount))
        XCTAssertTrue(cancelled.progress.isCancelled)

        // The async/await form: the same fetch with a caller's Progress, typed.
        struct Item: Decodable, FetchRequestResult {
            var id: String
            var name: String
            var createdAt: Date
            var done: Bool
        }
        let progress = Progress(totalUnitCount: -1)
        let items = try await connection.fetch(
            FetchRequest(
                entity: "Item", sort: [SortDescriptor(key: "name", ascending: false)], limit: 3, batchSize: 500),
            as: Item.self, progress: progress)
        XCTAssertEqual(items.map(\.name), ["item 9999", "item 9998", "item 9997"])
        XCTAssertEqual(progress.completedUnitCount, Int64(items.count))
        XCTAssertEqual(items.first?.done, false)
    }
}

/// Batch operations: progress as an AsyncSequence, the result, and cancel.
final class ClientBatchProgressTests: XCTestCase {
    func testBatchInsertAndDeleteReportProgressAsAnAsyncSequence() async throws {
        let daemon = try Daemon()
        defer { daemon.stop() }
        let connection = try await daemon.connect()
        _ = try await connection.call(ModelDefine.self, .init(entities: [WorldCup.item]))
        let count = 20_000
        let rows: [[String: JSONValue]] = (0..<count).map {
            ["name": "batch \($0)", "createdAt": "2026-01-01T00:00:00.000Z", "done": .bool($0 % 2 == 0)]
        }
        let inserting = try await connection.start(BatchInsert.self, .init(entity: "Item", objects: rows))
        var updates: [OperationProgress] = []
        for await update in inserting.progressUpdates { updates.append(update) }
        let inserted = try await inserting.value
        XCTAssertEqual(inserted.inserted, count)
        XCTAssertEqual(updates.last?.isFinished, true)
        XCTAssertEqual(updates.last?.total, Int64(count))
        XCTAssertEqual(updates.last?.completed, Int64(count))
        XCTAssertEqual(updates.map(\.completed), updates.map(\.completed).sorted())
        XCTAssertEqual(inserting.progress.completedUnitCount, Int64(count))

        let deleting = try await connection.start(
            BatchDelete.self, .init(entity: "Item", predicate: "done == YES"))
        let deleted = try await deleting.value
        XCTAssertEqual(deleted.count, count / 2)
        var last: OperationProgress?
        for await update in deleting.progressUpdates { last = update }
        XCTAssertEqual(last?.total, Int64(count / 2), "a late listener gets the final state")
        XCTAssertEqual(last?.isFinished, true)
        let left = try await connection.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(left, count / 2)
    }
}
