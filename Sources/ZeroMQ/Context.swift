import CZeroMQ

/// A libzmq context: the container of sockets and their I/O threads.
///
/// One context usually serves a whole process. It is thread-safe; the sockets
/// it creates are not. Terminating the context (by ``terminate()`` or on
/// deinit) blocks until every socket created from it is closed.
public final class Context: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private var terminated = false

    /// Creates a context with libzmq's defaults, or with `ioThreads` I/O threads
    /// (`ZMQ_IO_THREADS`, libzmq's default is 1): the threads that move every connection's bytes.
    ///
    /// `maxSockets` raises `ZMQ_MAX_SOCKETS` (libzmq's default is 1023), for a process
    /// that opens many sockets on one context (a load generator's sessions).
    public init(ioThreads: Int32? = nil, maxSockets: Int32? = nil) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else { throw .last("zmq_ctx_new") }
        self.handle = handle
        for (option, name, value) in [
            (ZMQ_IO_THREADS, "ZMQ_IO_THREADS", ioThreads), (ZMQ_MAX_SOCKETS, "ZMQ_MAX_SOCKETS", maxSockets),
        ] {
            guard let value, zmq_ctx_set(handle, option, value) != 0 else { continue }
            let error = ZMQError.last("zmq_ctx_set \(name)")
            zmq_ctx_term(handle)
            terminated = true
            throw error
        }
    }

    /// How many I/O threads the context runs (or will run, before its first socket).
    public var ioThreads: Int32 { zmq_ctx_get(handle, ZMQ_IO_THREADS) }

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
