import CZeroMQ
import Foundation

/// The libzmq baseline: a ROUTER that sends every message straight back, on
/// its own thread and context, through the C API with zero-copy messages.
final class RawEchoServer: @unchecked Sendable {
    // @unchecked: the socket is touched only on the echo thread after init.
    private let context: UnsafeMutableRawPointer
    private let socket: UnsafeMutableRawPointer
    /// The bound endpoint (with the chosen port for `tcp://…:*`).
    let endpoint: String
    private let finished = DispatchSemaphore(value: 0)

    /// Binds `endpoint` (`ipc://PATH`, `tcp://127.0.0.1:*`) and starts echoing.
    init(endpoint requested: String) throws {
        guard let context = zmq_ctx_new(), let socket = zmq_socket(context, ZMQ_ROUTER) else {
            throw BenchmarkError("cannot create the echo socket")
        }
        self.context = context
        self.socket = socket
        var linger: Int32 = 0
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, MemoryLayout<Int32>.size)
        guard zmq_bind(socket, requested) == 0 else {
            throw BenchmarkError("echo bind \(requested): \(String(cString: zmq_strerror(zmq_errno())))")
        }
        var buffer = [CChar](repeating: 0, count: 512)
        var size = buffer.count
        zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, &buffer, &size)
        endpoint = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let thread = Thread { [self] in
            echo()
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
}
