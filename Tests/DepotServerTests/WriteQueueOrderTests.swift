import DepotProtocol
import DepotStore
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import DepotServer

/// A write still being prepared off the writer lets later writes of other
/// sessions go first, never later writes of its own session.
final class WriteQueueOrderTests: XCTestCase {
    /// Publishes nothing; the test reads the order writes ran in.
    private final class Silent: CommitSubscriber {
        var publishingReads: Bool { false }
        func publish(_ transaction: CommittedTransaction, store: Result<Store, RPCError>?) {}
        func storeWasRebuilt(_ store: Result<Store, RPCError>) {}
    }

    func testWritesOfOtherSessionsOvertakeAWriteStillBeingPrepared() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-wq-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let queue = WriteQueue(store: try Store(path: directory.appendingPathComponent("depot.sqlite").path))
        let subscriber = Silent()
        let order = Mutex<[String]>([])
        let answered = DispatchSemaphore(value: 0)
        let prepared = Atomic<Bool>(false)
        // Hold the writer so that every entry below is queued before any runs.
        let release = DispatchSemaphore(value: 0)
        queue.async { release.wait() }
        func entry(_ name: String, session: String, groupable: Bool = false, ready: (@Sendable () -> Bool)? = nil)
            -> WriteQueue.Entry
        {
            var entry = WriteQueue.Entry(
                groupable: groupable,
                run: { _ in
                    // Like a prepared write's run: it waits for its preparation.
                    while !(ready?() ?? true) { Thread.sleep(forTimeInterval: 0.005) }
                    order.withLock { $0.append(name) }
                    return []
                },
                send: { _ in answered.signal() }, failure: { _ in [] })
            entry.session = Array(session.utf8)
            if let ready { entry.isReady = ready }
            return entry
        }
        queue.enqueue(
            entry("batch of a", session: "a", ready: { prepared.load(ordering: .acquiring) }), subscriber: subscriber)
        queue.enqueue(entry("save of b", session: "b", groupable: true), subscriber: subscriber)
        queue.enqueue(entry("save of a", session: "a", groupable: true), subscriber: subscriber)
        queue.enqueue(entry("save of c", session: "c", groupable: true), subscriber: subscriber)
        release.signal()
        // b and c go first; a's save waits for a's batch; the batch, unready, waits off the writer.
        for _ in 0..<2 { XCTAssertEqual(answered.wait(timeout: .now() + 5), .success) }
        Thread.sleep(forTimeInterval: 0.1)
        XCTAssertEqual(order.withLock { $0 }, ["save of b", "save of c"])
        prepared.store(true, ordering: .releasing)
        // Whoever readies a write wakes the writer, which never waited for it.
        queue.wake(subscriber)
        for _ in 0..<2 { XCTAssertEqual(answered.wait(timeout: .now() + 5), .success) }
        XCTAssertEqual(order.withLock { $0 }, ["save of b", "save of c", "batch of a", "save of a"])
    }

    func testTheWriterNeverWaitsForAPreparationASaveArrivingLaterCommitsFirst() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-wq-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let queue = WriteQueue(store: try Store(path: directory.appendingPathComponent("depot.sqlite").path))
        let subscriber = Silent()
        let order = Mutex<[String]>([])
        let answered = DispatchSemaphore(value: 0)
        let prepared = Atomic<Bool>(false)
        func entry(_ name: String, session: String, ready: (@Sendable () -> Bool)? = nil) -> WriteQueue.Entry {
            var entry = WriteQueue.Entry(
                groupable: ready == nil,
                run: { _ in
                    // Like a prepared write's run: it waits for its preparation.
                    while !(ready?() ?? true) { Thread.sleep(forTimeInterval: 0.005) }
                    order.withLock { $0.append(name) }
                    return []
                },
                send: { _ in answered.signal() }, failure: { _ in [] })
            entry.session = Array(session.utf8)
            if let ready { entry.isReady = ready }
            return entry
        }
        // The batch alone, the writer idle: it had every chance to take it before the save came.
        queue.enqueue(
            entry("batch of a", session: "a", ready: { prepared.load(ordering: .acquiring) }), subscriber: subscriber)
        Thread.sleep(forTimeInterval: 0.1)
        queue.enqueue(entry("save of b", session: "b"), subscriber: subscriber)
        XCTAssertEqual(answered.wait(timeout: .now() + 5), .success, "the save waited for the batch's preparation")
        XCTAssertEqual(order.withLock { $0 }, ["save of b"])
        prepared.store(true, ordering: .releasing)
        queue.wake(subscriber)
        XCTAssertEqual(answered.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(order.withLock { $0 }, ["save of b", "batch of a"])
    }
}
