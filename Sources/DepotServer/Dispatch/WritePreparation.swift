import DepotProtocol
import Dispatch
import Synchronization

/// A write's answer-to-be once its params are decoded and checked: what the
/// writer runs (with the writer's context: its group, its cancellation).
struct PreparedWrite: Sendable {
    let run: @Sendable (RequestContext) throws(RPCError) -> [UInt8]
}

/// The part of a write that needs no writer (decoding its params, checking and
/// converting a batch's objects), done on the reader pool while earlier writes
/// hold the writer. The write keeps its place in the queue: whoever gets to
/// the work first does it, the reader ahead of time or the writer when its
/// turn comes first, and the writer waits only for work already under way.
final class WritePreparation: Sendable {
    private enum State {
        case pending(@Sendable () -> Result<PreparedWrite, RPCError>)
        case running
        case finished(Result<PreparedWrite, RPCError>)
    }

    private let state: Mutex<State>
    private let finished = DispatchSemaphore(value: 0)

    init(_ work: @escaping @Sendable () -> Result<PreparedWrite, RPCError>) {
        state = Mutex(.pending(work))
    }

    /// Does the work unless the writer has taken it already (on the reader pool).
    func runAhead() {
        guard let work = claim() else { return }
        finish(work())
    }

    /// Whether the work is done: the writer can take it without waiting.
    var isFinished: Bool {
        state.withLock {
            if case .finished = $0 { return true }
            return false
        }
    }

    /// The prepared write: done here if nobody started it, awaited if it is under way.
    func take() -> Result<PreparedWrite, RPCError> {
        if let work = claim() {
            let result = work()
            finish(result)
            return result
        }
        while true {
            if let result = state.withLock({ state -> Result<PreparedWrite, RPCError>? in
                if case .finished(let result) = state { return result }
                return nil
            }) {
                return result
            }
            finished.wait()
        }
    }

    private func claim() -> (@Sendable () -> Result<PreparedWrite, RPCError>)? {
        state.withLock { state in
            guard case .pending(let work) = state else { return nil }
            state = .running
            return work
        }
    }

    private func finish(_ result: Result<PreparedWrite, RPCError>) {
        state.withLock { $0 = .finished(result) }
        finished.signal()
    }
}
