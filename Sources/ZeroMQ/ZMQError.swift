import CZeroMQ

/// An error reported by libzmq, carrying its `errno` value and message.
public struct ZMQError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The `errno` value libzmq reported.
    public let code: Int32
    /// The operation that failed, for context in logs.
    public let operation: String

    /// Creates an error for `code` raised by `operation`.
    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// Captures the calling thread's current libzmq error.
    static func last(_ operation: String) -> ZMQError {
        ZMQError(code: zmq_errno(), operation: operation)
    }

    /// libzmq's description of the error.
    public var message: String { String(cString: zmq_strerror(code)) }

    /// A non-blocking call would have blocked (`EAGAIN`).
    public var isWouldBlock: Bool { code == EAGAIN }

    /// A `ROUTER_MANDATORY` send named a peer that is not (or no longer) connected.
    public var isHostUnreachable: Bool { code == EHOSTUNREACH }

    /// The context was terminated while the call was in progress.
    public var isTerminated: Bool { code == ETERM }

    /// The call was interrupted by a signal.
    public var isInterrupted: Bool { code == EINTR }

    public var description: String { "\(operation): \(message) (errno \(code))" }
}
