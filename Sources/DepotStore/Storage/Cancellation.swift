import DepotProtocol
import Synchronization

/// A flag that a long operation polls between batches to stop early.
///
/// Set by `$/cancelRequest` on the transport loop, read by the worker doing
/// the fetch or batch write; a write that sees it rolls back.
public final class Cancellation: Sendable {
    private let flag = Atomic<Bool>(false)

    /// Creates an uncancelled flag.
    public init() {}

    /// Asks the operation to stop.
    public func cancel() { flag.store(true, ordering: .releasing) }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { flag.load(ordering: .acquiring) }

    /// Throws -32800 if cancelled.
    public func check() throws(RPCError) {
        if isCancelled { throw RPCError.cancelled }
    }
}
