import CZeroMQ

/// Waits on several sockets and plain file descriptors at once (`zmq_poll`).
///
/// A plain descriptor (an `eventfd`, a pipe) lets other threads wake the
/// thread that owns the sockets without touching them.
public struct Poller {
    /// What one item waits for.
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int16
        /// Creates events from their libzmq bits.
        public init(rawValue: Int16) { self.rawValue = rawValue }
        /// Readable: a message or bytes can be read.
        public static let readable = Events(rawValue: Int16(ZMQ_POLLIN))
        /// Writable: a message can be sent.
        public static let writable = Events(rawValue: Int16(ZMQ_POLLOUT))
    }

    private var items: [zmq_pollitem_t] = []
    // Keeps the sockets alive while their raw handles sit in `items`.
    private var sockets: [Socket?] = []

    /// Creates an empty poller.
    public init() {}

    /// Adds `socket`; returns the item's index in ``poll(timeoutMilliseconds:)``'s result.
    @discardableResult
    public mutating func add(_ socket: Socket, events: Events = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: socket.handle, fd: 0, events: events.rawValue, revents: 0))
        sockets.append(socket)
        return items.count - 1
    }

    /// Adds a plain file descriptor; returns the item's index.
    @discardableResult
    public mutating func add(fileDescriptor: Int32, events: Events = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        sockets.append(nil)
        return items.count - 1
    }

    /// Waits until an item is ready or `timeoutMilliseconds` pass (-1: forever).
    ///
    /// - Returns: the ready events of each item, by index; empty sets on timeout or signal.
    public mutating func poll(timeoutMilliseconds: Int) throws(ZMQError) -> [Events] {
        let count = items.count
        let rc = items.withUnsafeMutableBufferPointer { zmq_poll($0.baseAddress, Int32(count), timeoutMilliseconds) }
        if rc < 0 {
            let error = ZMQError.last("zmq_poll")
            if error.isInterrupted { return Array(repeating: [], count: count) }
            throw error
        }
        return items.map { Events(rawValue: $0.revents) }
    }
}
