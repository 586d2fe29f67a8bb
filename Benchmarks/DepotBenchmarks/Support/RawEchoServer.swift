import CZeroMQ
import Foundation

/// The libzmq baseline: a ROUTER that sends every message straight back, on
/// its own thread and context, through the C API with zero-copy messages.
///
/// With a `handler`, it is the baseline of a request/response server instead:
/// each payload goes to the handler (on the server thread) and its answer is
/// sent back, e.g. a raw SQLite commit per request in the save suite.
final class RawEchoServer: @unchecked Sendable {
    /// Answers one request payload (server thread).
    typealias Handler = (UnsafeRawBufferPointer) -> [UInt8]

    // @unchecked: the socket is touched only on the echo thread after init.
    private let context: UnsafeMutableRawPointer
    private let socket: UnsafeMutableRawPointer
    /// The bound endpoint (with the chosen port for `tcp://…:*`).
    let endpoint: String
    private let finished = DispatchSemaphore(value: 0)
    private let handler: Handler?

    /// Binds `endpoint` (`ipc://PATH`, `tcp://127.0.0.1:*`) and starts echoing,
    /// or answering with `handler`; `backlog` sets the listen queue (`ZMQ_BACKLOG`, libzmq's default 100).
    init(endpoint requested: String, backlog: Int32? = nil, handler: Handler? = nil) throws {
        self.handler = handler
        guard let context = zmq_ctx_new(), let socket = zmq_socket(context, ZMQ_ROUTER) else {
            throw BenchmarkError("cannot create the echo socket")
        }
        self.context = context
        self.socket = socket
        var linger: Int32 = 0
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, MemoryLayout<Int32>.size)
        if var backlog { zmq_setsockopt(socket, ZMQ_BACKLOG, &backlog, MemoryLayout<Int32>.size) }
        guard zmq_bind(socket, requested) == 0 else {
            throw BenchmarkError("echo bind \(requested): \(String(cString: zmq_strerror(zmq_errno())))")
        }
        var buffer = [CChar](repeating: 0, count: 512)
        var size = buffer.count
        zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, &buffer, &size)
        endpoint = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let thread = Thread { [self] in
            if self.handler == nil { echo() } else { serve() }
            finished.signal()
        }
        thread.name = "raw-echo"
        thread.start()
    }

    /// Stops the echo thread and closes the socket.
    func stop() {
        zmq_ctx_shutdown(context)
        finished.wait()
        zmq_close(socket)
        zmq_ctx_term(context)
    }

    private func echo() {
        var frame = zmq_msg_t()
        zmq_msg_init(&frame)
        defer { zmq_msg_close(&frame) }
        while true {
            // Forward each frame as it comes (routing id, then payload), keeping the "more" flag.
            guard zmq_msg_recv(&frame, socket, 0) >= 0 else {
                if zmq_errno() == EINTR { continue }
                return
            }
            let more = zmq_msg_more(&frame) != 0
            guard zmq_msg_send(&frame, socket, more ? ZMQ_SNDMORE : 0) >= 0 else { return }
        }
    }

    private func serve() {
        guard let handler else { return }
        var routingID = zmq_msg_t()
        var payload = zmq_msg_t()
        zmq_msg_init(&routingID)
        zmq_msg_init(&payload)
        defer {
            zmq_msg_close(&routingID)
            zmq_msg_close(&payload)
        }
        while true {
            guard Self.receive(&routingID, socket), Self.receive(&payload, socket) else { return }
            let answer = handler(UnsafeRawBufferPointer(start: zmq_msg_data(&payload), count: zmq_msg_size(&payload)))
            guard zmq_msg_send(&routingID, socket, ZMQ_SNDMORE) >= 0 else { return }
            let rc = answer.withUnsafeBytes { zmq_send(socket, $0.baseAddress, $0.count, 0) }
            guard rc >= 0 else { return }
        }
    }

    private static func receive(_ message: inout zmq_msg_t, _ socket: UnsafeMutableRawPointer) -> Bool {
        while zmq_msg_recv(&message, socket, 0) < 0 {
            if zmq_errno() != EINTR { return false }
        }
        return true
    }
}
