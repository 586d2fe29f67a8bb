import CZeroMQ
import Foundation

/// A DEALER socket driven straight through the libzmq C API, with its own
/// context: the client side of every round-trip measurement, for Depot and
/// for the raw echo alike, so that only the server differs.
final class RawDealer {
    private let context: UnsafeMutableRawPointer
    /// Whether the context is this socket's own (terminated with it).
    private let ownsContext: Bool
    private let socket: UnsafeMutableRawPointer
    private var message = zmq_msg_t()

    /// Connects to `endpoint`, in `sharedContext` (many sessions, one I/O thread) or a context of its own.
    /// Receives give up after `timeoutMilliseconds`.
    ///
    /// With `curve` (Z85 server public key, client public and secret keys) it is a CURVE client.
    /// With `unboundedReceive`, its receive queue has no high-water mark (a session that
    /// reads late keeps everything sent to it).
    init(
        endpoint: String, timeoutMilliseconds: Int32 = 30_000,
        curve: (serverKey: String, publicKey: String, secretKey: String)? = nil,
        sharedContext: UnsafeMutableRawPointer? = nil, unboundedReceive: Bool = false
    ) throws {
        guard let context = sharedContext ?? zmq_ctx_new() else { throw BenchmarkError("zmq_ctx_new failed") }
        ownsContext = sharedContext == nil
        guard let socket = zmq_socket(context, ZMQ_DEALER) else {
            if sharedContext == nil { zmq_ctx_term(context) }
            throw BenchmarkError("zmq_socket failed")
        }
        self.context = context
        self.socket = socket
        var linger: Int32 = 0
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, MemoryLayout<Int32>.size)
        var timeout = timeoutMilliseconds
        zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout, MemoryLayout<Int32>.size)
        if unboundedReceive {
            var unbounded: Int32 = 0
            zmq_setsockopt(socket, ZMQ_RCVHWM, &unbounded, MemoryLayout<Int32>.size)
        }
        zmq_msg_init(&message)
        if let curve {
            for (option, key) in [
                (ZMQ_CURVE_SERVERKEY, curve.serverKey), (ZMQ_CURVE_PUBLICKEY, curve.publicKey),
                (ZMQ_CURVE_SECRETKEY, curve.secretKey),
            ] {
                let bytes = Array(key.utf8)
                guard bytes.withUnsafeBytes({ zmq_setsockopt(socket, option, $0.baseAddress, $0.count) }) == 0 else {
                    throw BenchmarkError("setting CURVE keys: \(String(cString: zmq_strerror(zmq_errno())))")
                }
            }
        }
        guard zmq_connect(socket, endpoint) == 0 else {
            throw BenchmarkError("connect \(endpoint): \(String(cString: zmq_strerror(zmq_errno())))")
        }
    }

    private var closed = false

    deinit { close() }

    /// Closes the socket (and its own context); later sends and receives fail. Idempotent.
    func close() {
        guard !closed else { return }
        closed = true
        zmq_msg_close(&message)
        zmq_close(socket)
        if ownsContext { zmq_ctx_term(context) }
    }

    /// Sends one single-frame message.
    func send(_ bytes: [UInt8]) throws {
        let rc = bytes.withUnsafeBytes { zmq_send(socket, $0.baseAddress, $0.count, 0) }
        guard rc >= 0 else { throw BenchmarkError("send: \(String(cString: zmq_strerror(zmq_errno())))") }
    }

    /// Receives one message into the reusable message buffer and hands its bytes to `body`.
    func receive<T>(_ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        while true {
            let rc = zmq_msg_recv(&message, socket, 0)
            if rc >= 0 { break }
            let code = zmq_errno()
            if code == EINTR { continue }
            throw BenchmarkError(
                code == EAGAIN
                    ? "no answer within the receive timeout" : "receive: \(String(cString: zmq_strerror(code)))")
        }
        return try body(UnsafeRawBufferPointer(start: zmq_msg_data(&message), count: zmq_msg_size(&message)))
    }

    /// Receives one message as bytes.
    func receive() throws -> [UInt8] { try receive { Array($0) } }

    /// Receives one message if one is queued (no wait) and hands its bytes to `body`; `nil` when none is.
    func receiveIfReady<T>(_ body: (UnsafeRawBufferPointer) throws -> T) throws -> T? {
        while zmq_msg_recv(&message, socket, ZMQ_DONTWAIT) < 0 {
            let code = zmq_errno()
            if code == EAGAIN { return nil }
            if code != EINTR { throw BenchmarkError("receive: \(String(cString: zmq_strerror(code)))") }
        }
        return try body(UnsafeRawBufferPointer(start: zmq_msg_data(&message), count: zmq_msg_size(&message)))
    }

    /// Whether `bytes` contains `needle` (no parse).
    static func contains(_ bytes: UnsafeRawBufferPointer, _ needle: StaticString) -> Bool {
        contains(bytes, UnsafeRawBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount))
    }

    /// Sends `request` and waits for one message back; throws unless the answer
    /// contains `expected` (a cheap check that does not parse, so that the
    /// client's cost stays that of a raw echo).
    func roundTrip(_ request: [UInt8], expecting expected: StaticString? = nil) throws {
        try send(request)
        try receive { answer in
            guard let expected else { return }
            guard Self.contains(answer, expected) else {
                throw BenchmarkError("unexpected answer: \(String(decoding: answer.prefix(300), as: UTF8.self))")
            }
        }
    }

    private static func contains(_ haystack: UnsafeRawBufferPointer, _ needle: UnsafeRawBufferPointer) -> Bool {
        guard needle.count <= haystack.count, let first = needle.first else { return needle.isEmpty }
        var index = 0
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == first && memcmp(haystack.baseAddress! + index, needle.baseAddress!, needle.count) == 0
            {
                return true
            }
            index += 1
        }
        return false
    }
}
