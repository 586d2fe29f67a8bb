import Synchronization

/// Wakes one waiting task early: a ring is kept until the next wait, a wait ends on a ring, on its
/// timeout or on cancellation, whichever comes first.
final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var lastWaitID: UInt64 = 0
        /// Waits up to this id have timed out (possibly before they started waiting).
        var expiredThrough: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Wakes the current waiter, or the next one if none is waiting.
    func ring() {
        let continuation = state.withLock { state in
            if let waiter = state.waiter {
                state.waiter = nil
                return Optional(waiter.continuation)
            }
            state.rung = true
            return nil
        }
        continuation?.resume()
    }

    /// Waits for a ring, at most `timeout`; returns at once if rung since the last wait or cancelled.
    func wait(timeout: Duration) async {
        let id = state.withLock { state in
            state.lastWaitID += 1
            return state.lastWaitID
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // Also ends (at once) when the waiting task is cancelled.
                try? await Task.sleep(for: timeout)
                self.expire(id)
            }
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state in
                    if state.rung || state.expiredThrough >= id {
                        state.rung = false
                        return true
                    }
                    state.waiter = (id, continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
            group.cancelAll()
        }
    }

    private func expire(_ id: UInt64) {
        let continuation = state.withLock { state in
            state.expiredThrough = max(state.expiredThrough, id)
            guard let waiter = state.waiter, waiter.id == id else { return CheckedContinuation<Void, Never>?.none }
            state.waiter = nil
            return waiter.continuation
        }
        continuation?.resume()
    }
}
