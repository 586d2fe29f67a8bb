import Foundation
import Logging
import Synchronization
import ZeroMQ

/// The ZAP handler (ZeroMQ RFC 27) of the daemon's CURVE endpoints: libzmq asks
/// it about every handshake, and it accepts exactly the keys of the ``KeyRing``.
///
/// It binds `inproc://zeromq.zap.01` in the transport's context before any CURVE
/// endpoint is bound, and runs on its own thread. An accepted connection's
/// `User-Id` is the client's Z85 public key, so every message from it can be
/// checked against the keys in force at that moment (SIGHUP revocation).
final class ZAPHandler: @unchecked Sendable {
    // @unchecked: `socket` is touched only on the handler's thread after init.
    /// The domain Depot's endpoints use.
    static let domain = "depot"

    private let socket: Socket
    private let keys: KeyRing
    private let logger: Logger
    private let stopRequested = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init(context: Context, keys: KeyRing, logger: Logger) throws(ZMQError) {
        self.keys = keys
        self.logger = logger
        socket = try Socket(context: context, type: .router)
        try socket.setLinger(milliseconds: 0)
        do {
            try socket.bind("inproc://zeromq.zap.01")
        } catch {
            socket.close()
            throw error
        }
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "depot-zap"
        thread.start()
    }

    /// Stops the thread and closes the socket (before the context terminates).
    func stop() {
        guard !stopRequested.exchange(true, ordering: .relaxed) else { return }
        finished.wait()
    }

    private func run() {
        var poller = Poller()
        _ = poller.add(socket)
        while !stopRequested.load(ordering: .relaxed) {
            guard let ready = try? poller.poll(timeoutMilliseconds: 100), ready[0].contains(.readable) else { continue }
            while let message = try? socket.receive(dontWait: true) {
                if let reply = answer(message) { _ = try? socket.send(reply) }
            }
        }
        socket.close()
    }

    /// The reply to one ZAP request: `[peer, "", "1.0", requestID, status, text, userID, metadata]`.
    func answer(_ message: Message) -> Message? {
        // [peer, "", version, request id, domain, address, identity, mechanism, credentials...]
        guard message.count >= 8, message[1].isEmpty else { return nil }
        let requestID = message[3]
        let domain = String(decoding: message[4], as: UTF8.self)
        let address = String(decoding: message[5], as: UTF8.self)
        let mechanism = String(decoding: message[7], as: UTF8.self)
        func reply(_ status: String, _ text: String, userID: String = "") -> Message {
            [
                message[0], [], Array("1.0".utf8), requestID, Array(status.utf8), Array(text.utf8), Array(userID.utf8),
                [],
            ]
        }
        guard String(decoding: message[2], as: UTF8.self) == "1.0" else { return reply("400", "bad ZAP version") }
        guard domain == Self.domain else {
            logger.warning("refused a handshake from \(address): ZAP domain '\(domain)'")
            return reply("400", "unknown domain")
        }
        guard mechanism == "CURVE", message.count >= 9, let publicKey = Curve.z85Encode(message[8]) else {
            logger.warning("refused a handshake from \(address): mechanism \(mechanism) (CURVE is required)")
            return reply("400", "CURVE required")
        }
        guard let key = keys.key(publicKey) else {
            logger.warning("refused a handshake from \(address): key \(publicKey) is not authorized")
            return reply("400", "key not authorized")
        }
        logger.info("accepted key '\(key.name)' (\(key.role.rawValue)) from \(address)")
        return reply("200", "OK", userID: publicKey)
    }
}
