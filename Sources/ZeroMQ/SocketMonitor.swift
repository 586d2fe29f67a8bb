import CZeroMQ

/// A connection event of a monitored socket (`zmq_socket_monitor`).
public struct SocketEvent: Sendable, Hashable {
    /// What happened.
    public enum Kind: Sendable, Hashable {
        /// A connection to a peer was established.
        case connected
        /// A connection to a peer was lost (the peer closed or died); the value is its descriptor.
        case disconnected
        /// A listening endpoint could not accept a connection; the value is the errno (`EMFILE`: out of descriptors).
        case acceptFailed
        /// Any other libzmq event, by its `ZMQ_EVENT_*` number.
        case other(UInt16)
    }

    /// What happened.
    public var kind: Kind
    /// The event's value (a descriptor, an errno or an interval, depending on the event).
    public var value: UInt32
    /// The endpoint the event concerns.
    public var endpoint: String

    /// Reads an event from the two frames the monitor socket delivers, or `nil` when they are not one.
    public init?(_ message: Message) {
        guard message.count == 2, message[0].count >= 6 else { return nil }
        let header = message[0]
        let number = UInt16(header[0]) | UInt16(header[1]) << 8
        value = UInt32(header[2]) | UInt32(header[3]) << 8 | UInt32(header[4]) << 16 | UInt32(header[5]) << 24
        endpoint = String(decoding: message[1], as: UTF8.self)
        switch Int32(number) {
        case ZMQ_EVENT_CONNECTED: kind = .connected
        case ZMQ_EVENT_DISCONNECTED: kind = .disconnected
        case ZMQ_EVENT_ACCEPT_FAILED: kind = .acceptFailed
        default: kind = .other(number)
        }
    }
}

extension Socket {
    /// Publishes this socket's connect and disconnect events on a PAIR socket
    /// bound at `endpoint` (an `inproc://` name in the same context). Connect a
    /// `.pair` socket there and read each message with ``SocketEvent/init(_:)``.
    public func monitor(_ endpoint: String) throws(ZMQError) {
        try monitor(
            endpoint,
            events: ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    }

    /// Publishes only the disconnects of accepted connections and failed accepts
    /// (what a ROUTER's owner needs to free a peer's slot and to notice it is out of descriptors).
    public func monitorDisconnectsAndAcceptFailures(_ endpoint: String) throws(ZMQError) {
        try monitor(endpoint, events: ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED)
    }

    private func monitor(_ endpoint: String, events: Int32) throws(ZMQError) {
        guard zmq_socket_monitor(handle, endpoint, events) == 0 else {
            throw .last("zmq_socket_monitor \(endpoint)")
        }
    }
}
