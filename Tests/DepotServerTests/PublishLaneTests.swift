import DepotStore
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import DepotServer

/// The publish lane runs jobs one at a time, in ticket order, whichever threads queue them.
final class PublishLaneTests: XCTestCase {
    /// Jobs queued from many threads at once all run, each alone: a ticket never takes a place in
    /// the lane's queue ahead of an earlier one (which once left both waiting forever).
    func testJobsQueuedFromManyThreadsAllRunOneAtATime() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-lane-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("depot.sqlite").path)
        let lane = PublishLane(store: store, writer: DispatchQueue(label: "test.writer"))
        let running = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
        let ran = Atomic<Int>(0)
        let threads = 8
        let jobsPerThread = 2_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<jobsPerThread {
                lane.enqueue {
                    if running.add(1, ordering: .sequentiallyConsistent).newValue > 1 {
                        overlapped.store(true, ordering: .relaxed)
                    }
                    XCTAssertTrue(lane.isRunningJob)
                    ran.add(1, ordering: .relaxed)
                    running.subtract(1, ordering: .sequentiallyConsistent)
                }
            }
        }
        let drained = DispatchSemaphore(value: 0)
        Thread {
            lane.drain(); drained.signal()
        }.start()
        guard drained.wait(timeout: .now() + 30) == .success else {
            return XCTFail("the lane stopped after \(ran.load(ordering: .relaxed)) jobs")
        }
        XCTAssertEqual(ran.load(ordering: .relaxed), threads * jobsPerThread)
        XCTAssertFalse(overlapped.load(ordering: .relaxed), "two jobs ran at once")
        XCTAssertEqual(lane.perform { 42 }, 42)
    }
}
