import DepotProtocol
import DepotStore
import Dispatch
import Foundation
import Synchronization

/// What follows commits, in commit order, off the writer: publishing each
/// transaction's deltas and `store/didSave`, then sending the responses of
/// the requests that committed it (DESIGN.md §7: T's notifications before
/// T's response, T before T+1); and the one owner of the fetched-results
/// state (``ResultsEngine``), whose every read and change is a job here.
///
/// The writer queues a job after each write and goes on with the next one
/// at once. Jobs run one at a time in the order their tickets were issued.
/// A job that reads gets a store whose reads see exactly the state the
/// writer had committed when it queued the job (``Store/readLatestCommit(_:)``),
/// so a job sees what every earlier job saw plus its own commit, as if it
/// ran on the writer, however far the writer has moved on. Jobs that read
/// hold a reader each while they wait their turn; at most ``readerBudget``
/// do, so client reads keep readers of their own, and the writer waits when
/// publishing falls that far behind (back-pressure). A job that reads
/// nothing (``enqueue(_:)``, ``perform(_:)``) may be queued from any thread:
/// it runs after every job whose ticket was issued before its own.
///
/// One job at a time, and each job entirely on one thread: `Turns`' lock
/// orders each job's end before the next one's start, so state touched only
/// by jobs needs no lock of its own (``isRunningJob`` checks a caller is one).
///
/// A job must never wait for the writer: the writer may be waiting for a
/// reader that a queued job holds. Nor for another job (``perform(_:)``).
final class PublishLane: Sendable {
    private let store: Store
    /// Tickets handed out (on the writer queue) and finished, in order.
    private let turns = Turns()
    /// Where jobs that read nothing wait their turn, in the order of their tickets.
    private let queue = DispatchQueue(label: "depot.publisher")
    /// Held while a job that reads nothing takes its ticket and its place in `queue`.
    private let queueing = Mutex(())
    /// The most reading jobs queued at once (the store has readers for them and for client reads).
    static let readerBudget = 4
    private let readers = DispatchSemaphore(value: PublishLane.readerBudget)

    /// The writer's queue, where jobs that read are queued.
    private let writer: DispatchQueue

    /// A lane following the commits of `store`, made on the `writer` queue.
    init(store: Store, writer: DispatchQueue) {
        self.store = store
        self.writer = writer
    }

    /// Queues `job` after every job queued before it, with a store reading
    /// the state committed so far (or why no snapshot could be taken).
    ///
    /// Call on the writer queue, between writes.
    func enqueueReading(_ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(writer))
        readers.wait()
        let ticket = turns.issue()
        store.readLatestCommit { [turns, readers] snapshot in
            turns.wait(for: ticket)
            job(snapshot)
            turns.finish(ticket)
            readers.signal()
        }
    }

    /// Queues `job`, which reads nothing, after every job queued before it;
    /// runs it at once, on the calling thread, when no job is waiting.
    ///
    /// Call it from any thread; from a job, it queues `job` behind it.
    func enqueue(_ job: @escaping @Sendable () -> Void) {
        // A ticket and its place in the serial queue are taken together: were they not, a later
        // ticket could take an earlier place there and wait forever for the job queued behind it.
        let ticket = queueing.withLock { _ -> Int? in
            let ticket = turns.issue()
            if turns.begin(ticket) { return ticket }
            queue.async { [turns] in
                turns.wait(for: ticket)
                job()
                turns.finish(ticket)
            }
            return nil
        }
        guard let ticket else { return }
        job()
        turns.finish(ticket)
    }

    /// Runs `job` at once, on the calling thread, if no job is queued or
    /// running, and returns `true`; `false` (and `job` does not run) otherwise.
    func runIfIdle(_ job: () -> Void) -> Bool {
        guard let ticket = turns.issueIfIdle() else { return false }
        job()
        turns.finish(ticket)
        return true
    }

    /// Runs `job`, which reads nothing, after every job queued before it, and returns its result.
    ///
    /// Never from a job (it would wait for itself), nor on the writer queue
    /// while holding a reader.
    func perform<T: Sendable>(_ job: @escaping @Sendable () -> T) -> T {
        precondition(!isRunningJob, "a job of the publish lane waits for a later one")
        let outcome = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        enqueue {
            outcome.withLock { $0 = job() }
            done.signal()
        }
        done.wait()
        return outcome.withLock { $0! }
    }

    /// Whether the calling thread is running a job of this lane now.
    var isRunningJob: Bool { turns.isRunning }

    /// Whether no job is queued or running.
    var isIdle: Bool { turns.isIdle }

    /// Waits until every job queued so far has run.
    func drain() { turns.waitUntilIdle() }
}

/// Numbered turns: tickets are issued in order and run in that order.
private final class Turns: @unchecked Sendable {
    // @unchecked: `issued` and `finished` are read and written only under `condition`'s lock.
    private let condition = NSCondition()
    private var issued = 0
    private var finished = 0
    /// The thread running the current ticket's job (its `pthread_self()`), 0 when none runs. Set and
    /// cleared by that thread only, so a thread reading it without a lock sees its own id exactly
    /// while it runs a job: the ownership checks cost one load, and stay on in release builds.
    private let runner = Atomic<UInt>(0)

    func issue() -> Int {
        condition.lock()
        defer { condition.unlock() }
        issued += 1
        return issued
    }

    /// A ticket whose turn is now, marked as running on the calling thread, if none is issued and unfinished.
    func issueIfIdle() -> Int? {
        condition.lock()
        defer { condition.unlock() }
        guard finished == issued else { return nil }
        issued += 1
        runner.store(UInt(pthread_self()), ordering: .relaxed)
        return issued
    }

    /// Whether it is `ticket`'s turn; if so, its job runs on the calling thread from now on.
    func begin(_ ticket: Int) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard finished == ticket - 1 else { return false }
        runner.store(UInt(pthread_self()), ordering: .relaxed)
        return true
    }

    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finished == issued
    }

    var isRunning: Bool { runner.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// Waits for `ticket`'s turn; its job then runs on the calling thread.
    func wait(for ticket: Int) {
        condition.lock()
        defer { condition.unlock() }
        while finished < ticket - 1 { condition.wait() }
        runner.store(UInt(pthread_self()), ordering: .relaxed)
    }

    func finish(_ ticket: Int) {
        condition.lock()
        defer { condition.unlock() }
        finished = ticket
        runner.store(0, ordering: .relaxed)
        condition.broadcast()
    }

    func waitUntilIdle() {
        condition.lock()
        defer { condition.unlock() }
        let target = issued
        while finished < target { condition.wait() }
    }
}
