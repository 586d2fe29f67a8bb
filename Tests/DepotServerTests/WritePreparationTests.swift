import DepotProtocol
import Dispatch
import Synchronization
import XCTest

@testable import DepotServer

/// A write's preparation runs exactly once, on whichever side gets to it
/// first, and the writer always gets its result, error included.
final class WritePreparationTests: XCTestCase {
    /// How many times a preparation's work ran.
    private final class Runs: Sendable {
        private let count = Atomic<Int>(0)
        func add() { count.add(1, ordering: .relaxed) }
        var value: Int { count.load(ordering: .relaxed) }
    }

    private func preparation(counting runs: Runs, delay: Double = 0, fails: Bool = false) -> WritePreparation {
        WritePreparation {
            runs.add()
            if delay > 0 { Thread.sleep(forTimeInterval: delay) }
            if fails { return .failure(.invalidParams("bad", field: "params.objects[3]")) }
            return .success(PreparedWrite { _ in Array("done".utf8) })
        }
    }

    func testTheWriterDoesTheWorkWhenNobodyStartedIt() throws {
        let runs = Runs()
        let preparation = preparation(counting: runs)
        XCTAssertNoThrow(try preparation.take().get())
        preparation.runAhead()
        XCTAssertEqual(runs.value, 1)
    }

    func testTheWriterWaitsForWorkUnderWayAndGetsItsError() throws {
        let runs = Runs()
        let preparation = preparation(counting: runs, delay: 0.2, fails: true)
        let started = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            started.signal()
            preparation.runAhead()
        }
        started.wait()
        Thread.sleep(forTimeInterval: 0.05)
        switch preparation.take() {
        case .success: XCTFail("the preparation failed; the writer must get its error")
        case .failure(let error): XCTAssertEqual(error.data?["field"], "params.objects[3]")
        }
        XCTAssertEqual(runs.value, 1)
    }

    func testRacingSidesRunItOnce() {
        for _ in 0..<500 {
            let runs = Runs()
            let preparation = preparation(counting: runs)
            DispatchQueue.global().async { preparation.runAhead() }
            XCTAssertNoThrow(try preparation.take().get())
            XCTAssertEqual(runs.value, 1)
        }
    }
}
