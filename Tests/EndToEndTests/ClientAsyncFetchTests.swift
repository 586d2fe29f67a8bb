import DepotClient
import DepotTestSupport
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

/// An asynchronous fetch larger than the daemon's cap on one answer (100,000
/// objects by default) streams by itself: objects as they arrive, the whole
/// array at the end, progress, and cancel.
final class ClientStreamingFetchTests: XCTestCase {
    static let itemCount = 300_000

    static func name(_ index: Int) -> String { String(format: "item %06d", index) }

    func testThreeHundredThousandObjectsStreamWithProgress() async throws {
        let daemon = try Daemon()
        defer { daemon.stop() }
        let connection = try await daemon.connect()
        _ = try await connection.call(ModelDefine.self, .init(entities: [WorldCup.item]))
        // store/batchInsert in chunks of 50,000, the params built as JSON directly (quicker than Codable).
        for chunk in stride(from: 0, to: Self.itemCount, by: 50_000) {
            let rows: [JSONValue] = (chunk..<chunk + 50_000).map {
                ["name": .string(Self.name($0)), "createdAt": "2026-01-01T00:00:00.000Z", "done": .bool($0 % 3 == 0)]
            }
            let inserted = try await connection.call(
                method: BatchInsert.name, params: ["entity": "Item", "objects": .array(rows)], timeout: .seconds(300))
            XCTAssertEqual(inserted["inserted"], 50_000)
        }
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "name")], batchSize: 5_000)
        // A plain fetch of this size is refused: the client must stream.
        let refused = await assertServerError(.invalidParams) {
            try await connection.call(StoreFetch.self, request, timeout: .seconds(300))
        }
        XCTAssertTrue(refused?.message.contains("partialResultToken") == true, refused?.message ?? "")

        let completions = Mutex(0)
        let running = try await connection.execute(
            AsynchronousFetchRequest(fetchRequest: request) { result in
                XCTAssertEqual(result.finalResult?.count, Self.itemCount)
                completions.withLock { $0 += 1 }
            })
        let progress = Task {
            var updates: [FetchProgress] = []
            for await update in running.progressUpdates { updates.append(update) }
            return updates
        }
        // The objects as they arrive: in order, the first ones long before the fetch ends.
        var seen = 0
        var inOrder = true
        var firstArrivedEarly = false
        for try await item in running.objects {
            if seen == 0 { firstArrivedEarly = running.result == nil }
            inOrder = inOrder && item.string("name") == Self.name(seen)
            seen += 1
        }
        XCTAssertEqual(seen, Self.itemCount)
        XCTAssertTrue(inOrder, "objects arrive in the request's order")
        XCTAssertTrue(firstArrivedEarly, "the first objects came while the fetch still ran")
        let all = try await running.value
        XCTAssertEqual(all.count, Self.itemCount)
        XCTAssertEqual(all.first?.string("name"), Self.name(0))
        XCTAssertEqual(all.last?.string("name"), Self.name(Self.itemCount - 1))
        XCTAssertEqual(all[123_456].bool("done"), 123_456 % 3 == 0)
        XCTAssertEqual(Set(all.map(\.id)).count, Self.itemCount, "no object twice")
        XCTAssertEqual(completions.withLock { $0 }, 1)
        let updates = await progress.value
        XCTAssertEqual(updates.last?.isFinished, true)
        XCTAssertEqual(updates.last?.total, Int64(Self.itemCount))
        XCTAssertEqual(updates.last?.completed, Int64(Self.itemCount))
        XCTAssertGreaterThan(updates.count, 10, "progress rose step by step")
        XCTAssertEqual(updates.map(\.completed), updates.map(\.completed).sorted(), "completed never goes back")
        XCTAssertEqual(running.progress.totalUnitCount, Int64(Self.itemCount))
        XCTAssertEqual(running.progress.completedUnitCount, Int64(Self.itemCount))
        // A late iteration starts from the first object.
        var late = 0
        for try await _ in running.objects { late += 1 }
        XCTAssertEqual(late, Self.itemCount)

        // The async/await form streams too, typed, with a predicate.
        struct Item: Decodable, Sendable {
            var id: String
            var name: String
            var done: Bool
        }
        let done = try await connection.fetch(
            FetchRequest(
                entity: "Item", predicate: "done == YES", sort: [SortDescriptor(key: "name")], batchSize: 10_000),
            as: Item.self)
        XCTAssertEqual(done.count, Self.itemCount / 3)
        XCTAssertTrue(done.allSatisfy(\.done))

        // Cancel as soon as objects flow: the sequence throws a cancellation error after what came.
        // (At the first object, not later: the daemon streams far faster than this loop consumes,
        // and a cancel sent after it has sent every batch finds the fetch already answered.)
        let cancelled = try await connection.execute(
            AsynchronousFetchRequest(
                fetchRequest: FetchRequest(entity: "Item", sort: [SortDescriptor(key: "name")], batchSize: 1_000)))
        var before = 0
        do {
            for try await _ in cancelled.objects {
                before += 1
                if before == 1 { cancelled.cancel() }
            }
            XCTFail("the fetch should have been cancelled")
        } catch {
            XCTAssertTrue(error.isCancellation, "\(error)")
        }
        XCTAssertGreaterThanOrEqual(before, 1)
        XCTAssertLessThan(before, Self.itemCount)
        do {
            _ = try await cancelled.value
            XCTFail("the fetch should have been cancelled")
        } catch {
            XCTAssertTrue(error.isCancellation, "\(error)")
        }
        XCTAssertNil(cancelled.finalResult)
        // The connection stays usable.
        let count = try await connection.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(count, Self.itemCount)
    }
}
