import CZeroMQ

/// The kinds of libzmq socket that Depot uses.
public enum SocketType: Sendable {
    /// Routes messages to and from many peers by routing id (the server side).
    case router
    /// An asynchronous peer of a ROUTER (the client side).
    case dealer
    /// One end of an exclusive pair.
    case pair
    /// Sends to pullers.
    case push
    /// Receives from pushers.
    case pull

    var rawValue: Int32 {
        switch self {
        case .router: ZMQ_ROUTER
        case .dealer: ZMQ_DEALER
        case .pair: ZMQ_PAIR
        case .push: ZMQ_PUSH
        case .pull: ZMQ_PULL
        }
    }
}

/// One multipart message: its frames in order.
public typealias Message = [[UInt8]]

/// A libzmq socket.
///
/// A socket is not thread-safe: give it one owner thread, and hand messages to
/// that thread through a queue (SwiftNIO's rule of one owner per I/O resource).
/// It is `@unchecked Sendable` only so that it can be moved to its owner.
public final class Socket: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private var closed = false

    /// Creates a socket of `type` in `context`.
    public init(context: Context, type: SocketType) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.rawValue) else { throw .last("zmq_socket") }
        self.handle = handle
    }

    deinit { close() }

    /// Closes the socket; pending outbound messages are kept for the linger period.
    public func close() {
        guard !closed else { return }
        closed = true
        zmq_close(handle)
    }

    /// Binds to `endpoint` (`tcp://127.0.0.1:5555`, `ipc:///path`, `inproc://name`).
    public func bind(_ endpoint: String) throws(ZMQError) {
        guard zmq_bind(handle, endpoint) == 0 else { throw .last("bind \(endpoint)") }
    }

    /// Connects to `endpoint`; the connection completes in the background.
    public func connect(_ endpoint: String) throws(ZMQError) {
        guard zmq_connect(handle, endpoint) == 0 else { throw .last("connect \(endpoint)") }
    }

    /// Stops listening on `endpoint`.
    public func unbind(_ endpoint: String) throws(ZMQError) {
        guard zmq_unbind(handle, endpoint) == 0 else { throw .last("unbind \(endpoint)") }
    }

    /// Sends `frames` as one multipart message.
    ///
    /// - Parameter dontWait: fail with `EAGAIN` instead of blocking when the
    ///   peer's high-water mark is reached.
    /// - Returns: `false` when `dontWait` is set and the message could not be queued.
    ///   A ROUTER with ``routerMandatory`` set throws `EHOSTUNREACH` for an unknown peer.
    @discardableResult
    public func send(_ frames: Message, dontWait: Bool = false) throws(ZMQError) -> Bool {
        precondition(!frames.isEmpty, "a message has at least one frame")
        for (index, frame) in frames.enumerated() {
            var flags: Int32 = index < frames.count - 1 ? ZMQ_SNDMORE : 0
            if dontWait { flags |= ZMQ_DONTWAIT }
            while true {
                let rc = frame.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags) }
                if rc >= 0 { break }
                let error = ZMQError.last("send")
                if error.isInterrupted { continue }
                // Only the first frame can fail with EAGAIN: later frames of a
                // message are always accepted once the first one was.
                if error.isWouldBlock && index == 0 { return false }
                throw error
            }
        }
        return true
    }

    /// Sends a single-frame message.
    @discardableResult
    public func send(_ frame: [UInt8], dontWait: Bool = false) throws(ZMQError) -> Bool {
        try send([frame], dontWait: dontWait)
    }

    /// Receives one multipart message.
    ///
    /// - Parameter dontWait: return `nil` instead of blocking when nothing is queued.
    /// - Returns: the frames, or `nil` when nothing was ready (or the receive timed out).
    public func receive(dontWait: Bool = false) throws(ZMQError) -> Message? {
        try receive(dontWait: dontWait, reading: nil)?.frames
    }

    /// Receives one multipart message and, when `property` is named, that
    /// metadata property of its last frame (`zmq_msg_gets`), with the descriptor
    /// of the connection it came in on (`ZMQ_SRCFD`; -1 when it has none).
    ///
    /// - Returns: `nil` when `dontWait` is set and nothing was ready.
    public func receive(dontWait: Bool, reading property: String?) throws(ZMQError) -> (
        frames: Message, property: String?, sourceDescriptor: Int32
    )? {
        var frames: Message = []
        var message = zmq_msg_t()
        zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        while true {
            let flags: Int32 = dontWait && frames.isEmpty ? ZMQ_DONTWAIT : 0
            let rc = zmq_msg_recv(&message, handle, flags)
            if rc < 0 {
                let error = ZMQError.last("receive")
                if error.isInterrupted { continue }
                if error.isWouldBlock && frames.isEmpty { return nil }
                throw error
            }
            let size = zmq_msg_size(&message)
            if let data = zmq_msg_data(&message) {
                frames.append(Array(UnsafeRawBufferPointer(start: data, count: size)))
            } else {
                frames.append([])
            }
            if zmq_msg_more(&message) == 0 {
                // ZMQ_SRCFD: the descriptor of the connection it came in on (-1 for inproc).
                let source = zmq_msg_get(&message, ZMQ_SRCFD)
                return (
                    frames, property.flatMap { zmq_msg_gets(&message, $0) }.map { String(cString: $0) }, source
                )
            }
        }
    }

    // MARK: Options

    private func set(_ option: Int32, _ value: Int32) throws(ZMQError) {
        var value = value
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int32>.size) == 0 else {
            throw .last("setsockopt \(option)")
        }
    }

    private func set(_ option: Int32, int64 value: Int64) throws(ZMQError) {
        var value = value
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int64>.size) == 0 else {
            throw .last("setsockopt \(option)")
        }
    }

    private func set(_ option: Int32, bytes: [UInt8]) throws(ZMQError) {
        let rc = bytes.withUnsafeBytes { zmq_setsockopt(handle, option, $0.baseAddress, $0.count) }
        guard rc == 0 else { throw .last("setsockopt \(option)") }
    }

    private func getInt32(_ option: Int32) throws(ZMQError) -> Int32 {
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        guard zmq_getsockopt(handle, option, &value, &size) == 0 else { throw .last("getsockopt \(option)") }
        return value
    }

    /// `ZMQ_ROUTER_MANDATORY`: a send to an unknown peer fails with `EHOSTUNREACH` instead of being dropped.
    public func setRouterMandatory(_ on: Bool) throws(ZMQError) { try set(ZMQ_ROUTER_MANDATORY, Int32(on ? 1 : 0)) }

    /// `ZMQ_MAXMSGSIZE`: inbound messages larger than `bytes` drop the connection (-1: no limit).
    public func setMaxMessageSize(_ bytes: Int64) throws(ZMQError) { try set(ZMQ_MAXMSGSIZE, int64: bytes) }

    /// `ZMQ_SNDHWM`: how many messages may queue outbound per peer (0: no limit).
    public func setSendHighWaterMark(_ messages: Int32) throws(ZMQError) { try set(ZMQ_SNDHWM, messages) }

    /// `ZMQ_RCVHWM`: how many messages may queue inbound per peer (0: no limit).
    public func setReceiveHighWaterMark(_ messages: Int32) throws(ZMQError) { try set(ZMQ_RCVHWM, messages) }

    /// `ZMQ_LINGER`: how long `close` keeps unsent messages, in milliseconds (-1: forever).
    public func setLinger(milliseconds: Int32) throws(ZMQError) { try set(ZMQ_LINGER, milliseconds) }

    /// `ZMQ_RCVTIMEO`: how long a blocking receive waits, in milliseconds (-1: forever).
    public func setReceiveTimeout(milliseconds: Int32) throws(ZMQError) { try set(ZMQ_RCVTIMEO, milliseconds) }

    /// `ZMQ_SNDTIMEO`: how long a blocking send waits, in milliseconds (-1: forever).
    public func setSendTimeout(milliseconds: Int32) throws(ZMQError) { try set(ZMQ_SNDTIMEO, milliseconds) }

    /// `ZMQ_HEARTBEAT_IVL`, `ZMQ_HEARTBEAT_TIMEOUT`: ZMTP-level pings on each connection, in milliseconds.
    public func setHeartbeat(intervalMilliseconds: Int32, timeoutMilliseconds: Int32) throws(ZMQError) {
        try set(ZMQ_HEARTBEAT_IVL, intervalMilliseconds)
        try set(ZMQ_HEARTBEAT_TIMEOUT, timeoutMilliseconds)
    }

    /// `ZMQ_IMMEDIATE`: queue messages only to completed connections.
    public func setImmediate(_ on: Bool) throws(ZMQError) { try set(ZMQ_IMMEDIATE, Int32(on ? 1 : 0)) }

    /// `ZMQ_BACKLOG`: how many connections the kernel queues on a listening endpoint before
    /// they are accepted (libzmq's default is 100; capped by `net.core.somaxconn`). Set before binding.
    public func setBacklog(_ connections: Int32) throws(ZMQError) { try set(ZMQ_BACKLOG, connections) }

    /// The `ZMQ_BACKLOG` in force.
    public func backlog() throws(ZMQError) -> Int32 { try getInt32(ZMQ_BACKLOG) }

    /// `ZMQ_ROUTING_ID`: this socket's identity as seen by a ROUTER peer.
    public func setRoutingID(_ id: [UInt8]) throws(ZMQError) { try set(ZMQ_ROUTING_ID, bytes: id) }

    /// `ZMQ_RECONNECT_IVL`: the delay before reconnecting a dropped connection, in milliseconds.
    public func setReconnectInterval(milliseconds: Int32) throws(ZMQError) {
        try set(ZMQ_RECONNECT_IVL, milliseconds)
    }

    /// `ZMQ_RECONNECT_IVL_MAX`: the interval doubles after each failed reconnect up to this, in milliseconds.
    public func setReconnectIntervalMax(milliseconds: Int32) throws(ZMQError) {
        try set(ZMQ_RECONNECT_IVL_MAX, milliseconds)
    }

    /// `ZMQ_LAST_ENDPOINT`: the endpoint last bound, with the port the system chose for `tcp://…:*`.
    public func lastEndpoint() throws(ZMQError) -> String {
        var buffer = [CChar](repeating: 0, count: 1024)
        var size = buffer.count
        guard zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buffer, &size) == 0 else {
            throw .last("getsockopt ZMQ_LAST_ENDPOINT")
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `ZMQ_EVENTS`: whether a message can be received now without blocking.
    public func hasPendingInput() throws(ZMQError) -> Bool {
        try getInt32(ZMQ_EVENTS) & Int32(ZMQ_POLLIN) != 0
    }
}
