import CZeroMQ

/// A libzmq context: the container of sockets and their I/O threads.
///
/// One context usually serves a whole process. It is thread-safe; the sockets
/// it creates are not. Terminating the context (by ``terminate()`` or on
/// deinit) blocks until every socket created from it is closed.
public final class Context: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private var terminated = false

    /// Creates a context with libzmq's defaults.
    public init() throws(ZMQError) {
        guard let handle = zmq_ctx_new() else { throw .last("zmq_ctx_new") }
        self.handle = handle
    }

    /// Ends the context: blocked calls on its sockets fail with `ETERM`.
    public func shutdown() {
        zmq_ctx_shutdown(handle)
    }

    /// Terminates the context, waiting until every socket is closed.
    public func terminate() {
        guard !terminated else { return }
        terminated = true
        while zmq_ctx_term(handle) != 0 && zmq_errno() == EINTR {}
    }

    deinit { terminate() }
}

/// The version of the libzmq library linked in, as (major, minor, patch).
public var libraryVersion: (major: Int32, minor: Int32, patch: Int32) {
    var major: Int32 = 0
    var minor: Int32 = 0
    var patch: Int32 = 0
    zmq_version(&major, &minor, &patch)
    return (major, minor, patch)
}
