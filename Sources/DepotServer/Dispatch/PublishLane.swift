import DepotProtocol
import DepotStore
import Dispatch
import Foundation
import Synchronization

/// What follows commits, in commit order, off the writer: publishing each
/// transaction's deltas and `store/didSave`, then sending the responses of
/// the requests that committed it (DESIGN.md §7: T's notifications before
/// T's response, T before T+1).
///
/// The writer queues a job after each write and goes on with the next one
/// at once. Jobs run one at a time in the order the writer queued them. A
/// job that reads gets a store whose reads see exactly the state the writer
/// had committed when it queued the job (``Store/readLatestCommit(_:)``),
/// so a job sees what every earlier job saw plus its own commit, as if it
/// ran on the writer, however far the writer has moved on. Jobs that read
/// hold a reader each while they wait their turn; at most ``readerBudget``
/// do, so client reads keep readers of their own, and the writer waits when
/// publishing falls that far behind (back-pressure).
///
/// A job must never wait for the writer: the writer may be waiting for a
/// reader that a queued job holds.
final class PublishLane: Sendable {
    private let store: Store
    /// Tickets handed out (on the writer queue) and finished, in order.
    private let turns = Turns()
    /// Where jobs that read nothing wait their turn.
    private let queue = DispatchQueue(label: "depot.publisher")
    /// The most reading jobs queued at once (the store has readers for them and for client reads).
    static let readerBudget = 4
    private let readers = DispatchSemaphore(value: PublishLane.readerBudget)

    /// A lane following the commits of `store`.
    init(store: Store) {
        self.store = store
    }

    /// Queues `job` after every job queued before it, with a store reading
    /// the state committed so far (or why no snapshot could be taken).
    ///
    /// Call on the writer queue, between writes.
    func enqueueReading(_ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
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
    /// Call on the writer queue.
    func enqueue(_ job: @escaping @Sendable () -> Void) {
        let ticket = turns.issue()
        if turns.isCurrent(ticket) {
            job()
            return turns.finish(ticket)
        }
        queue.async { [turns] in
            turns.wait(for: ticket)
            job()
            turns.finish(ticket)
        }
    }

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

    func issue() -> Int {
        condition.lock()
        defer { condition.unlock() }
        issued += 1
        return issued
    }

    func isCurrent(_ ticket: Int) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return finished == ticket - 1
    }

    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finished == issued
    }

    func wait(for ticket: Int) {
        condition.lock()
        defer { condition.unlock() }
        while finished < ticket - 1 { condition.wait() }
    }

    func finish(_ ticket: Int) {
        condition.lock()
        defer { condition.unlock() }
        finished = ticket
        condition.broadcast()
    }

    func waitUntilIdle() {
        condition.lock()
        defer { condition.unlock() }
        let target = issued
        while finished < target { condition.wait() }
    }
}
