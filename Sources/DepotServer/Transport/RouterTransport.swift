import Foundation
import Logging
import Synchronization
import ZeroMQ

/// What the transport hands up: one inbound frame from one peer.
protocol TransportDelegate: AnyObject, Sendable {
    /// A message arrived (transport thread). `payload` is the frame after the routing id.
    ///
    /// `keyID` is the client's CURVE public key (Z85) on an authenticated endpoint, `nil` on a plain one.
    /// `moreWaiting` says that more messages were received with it and follow at once.
    func transport(
        _ transport: RouterTransport, didReceive payload: [UInt8], from routingID: [UInt8], keyID: String?,
        moreWaiting: Bool)
    /// A send failed because the peer is gone (`ROUTER_MANDATORY`).
    func transport(_ transport: RouterTransport, peerVanished routingID: [UInt8])
    /// A peer whose backlog had built up took everything queued for it.
    func transport(_ transport: RouterTransport, didDrain routingID: [UInt8])
    /// Called about once a second on the transport thread, for timers.
    func transportDidTick(_ transport: RouterTransport)
}

/// The socket loop: one thread that owns the ROUTER socket, receives every
/// inbound message, and sends everything the outbox (a ``Mailbox``) collects.
///
/// Messages a peer cannot take yet (its high-water mark is reached) wait in a
/// per-peer backlog and are retried; the backlog's size is exposed so that the
/// server can apply its slow-consumer policy.
final class RouterTransport: @unchecked Sendable {
    // @unchecked: `socket`, `backlog` and `vanished` are touched only on the transport thread.
    private let context: Context
    private let socket: Socket
    let outbox = Mailbox<OutboundMessage>()
    private let logger: Logger
    private let stopRequested = Mutex(false)
    private var backlog: [[UInt8]: [[UInt8]]] = [:]
    /// Peers a send found gone, reported to the delegate by the loop (``reportVanished()``).
    private var vanished: Set<[UInt8]> = []
    /// Backlog sizes, readable from any thread (the slow-consumer policy reads them).
    private let backlogSizes = Mutex<[[UInt8]: Int]>([:])
    private var thread: Thread?
    /// The loop thread's `pthread_self()`, 0 until it runs: lets ``send(_:to:)`` know where it is.
    private let transportThreadID = Atomic<UInt>(0)
    private let finished = DispatchSemaphore(value: 0)
    private var zapHandler: ZAPHandler?
    /// Every endpoint bound, with the port the system chose for `tcp://…:*`, in bind order.
    private(set) var boundEndpoints: [String] = []
    weak var delegate: (any TransportDelegate)?

    /// Binds every endpoint; throws on the first that fails.
    ///
    /// With `security`, every `tcp://` endpoint is a CURVE server whose handshakes
    /// a ``ZAPHandler`` decides; other endpoints (`ipc://`) are bound first, plain.
    init(
        endpoints: [String], maxMessageSize: Int64, sendHighWaterMark: Int32, security: TransportSecurity? = nil,
        logger: Logger
    ) throws(ZMQError) {
        self.logger = logger
        context = try Context()
        socket = try Socket(context: context, type: .router)
        try socket.setRouterMandatory(true)
        try socket.setMaxMessageSize(maxMessageSize)
        try socket.setSendHighWaterMark(sendHighWaterMark)
        try socket.setReceiveHighWaterMark(0)
        try socket.setLinger(milliseconds: 1000)
        do {
            // Options are copied into an endpoint when it is bound: plain ones first.
            let secured = security == nil ? [] : endpoints.filter { $0.hasPrefix("tcp://") }
            for endpoint in endpoints where !secured.contains(endpoint) {
                try socket.bind(endpoint)
                boundEndpoints.append((try? socket.lastEndpoint()) ?? endpoint)
            }
            if let security, !secured.isEmpty {
                zapHandler = try ZAPHandler(context: context, keys: security.keys, logger: logger)
                try socket.setZAPDomain(ZAPHandler.domain)
                if !socket.setZAPEnforceDomain(true) {
                    logger.debug("libzmq has no ZMQ_ZAP_ENFORCE_DOMAIN; the ZAP handler decides every handshake")
                }
                try socket.setCurveServer(secretKey: security.secretKey)
                for endpoint in secured {
                    try socket.bind(endpoint)
                    boundEndpoints.append((try? socket.lastEndpoint()) ?? endpoint)
                }
            }
        } catch {
            // Closed before the context terminates, which would otherwise wait for it forever.
            zapHandler?.stop()
            socket.close()
            throw error
        }
    }

    deinit {
        // The sockets must close before the context terminates (when start() never ran).
        zapHandler?.stop()
        socket.close()
    }

    /// The endpoint last bound, with the port the system chose for `tcp://…:*`.
    var lastEndpoint: String { (try? socket.lastEndpoint()) ?? "" }

    /// Starts the loop on its own thread.
    func start() {
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "depot-transport"
        thread.stackSize = 4 << 20
        self.thread = thread
        thread.start()
    }

    /// Stops the loop after sending what is queued, and closes the socket.
    func stop() {
        stopRequested.withLock { $0 = true }
        outbox.wake()
        finished.wait()
    }

    /// Sends now if on the transport thread with nothing queued ahead, else queues.
    ///
    /// Inline handlers (`ping`, `initialize`) answer on the transport thread:
    /// sending directly saves the outbox's wake-up (an eventfd write, a poll and a
    /// read per message). Anything already queued keeps its place in line.
    func send(_ payload: [UInt8], to routingID: [UInt8]) {
        if transportThreadID.load(ordering: .relaxed) == UInt(pthread_self()), backlog.isEmpty, outbox.count == 0,
            deliver(payload, to: routingID)
        {
            return
        }
        outbox.post(OutboundMessage(routingID: routingID, payload: payload))
    }

    /// Queues several messages with one hand-off (and at most one wake-up) to the transport thread.
    func send(contentsOf messages: [(bytes: [UInt8], peer: [UInt8])]) {
        outbox.post(contentsOf: messages.map { OutboundMessage(routingID: $0.peer, payload: $0.bytes) })
    }

    /// How many messages wait for `routingID` beyond ZeroMQ's own queue (any thread; as of the last flush).
    func backlogCount(for routingID: [UInt8]) -> Int { backlogSizes.withLock { $0[routingID] ?? 0 } }

    private func run() {
        transportThreadID.store(UInt(pthread_self()), ordering: .relaxed)
        var poller = Poller()
        let socketIndex = poller.add(socket)
        let wakeIndex = poller.add(fileDescriptor: outbox.wakeDescriptor)
        var nextTick = ContinuousClock.now + .seconds(1)
        while true {
            let timeout = backlog.isEmpty ? 250 : 5
            let ready: [Poller.Events]
            do {
                ready = try poller.poll(timeoutMilliseconds: timeout)
            } catch {
                logger.error("poll failed: \(error)")
                break
            }
            if ready[socketIndex].contains(.readable) { receiveAll() }
            if ready[wakeIndex].contains(.readable) || !backlog.isEmpty { flush() }
            reportVanished()
            if ContinuousClock.now >= nextTick {
                nextTick = ContinuousClock.now + .seconds(1)
                delegate?.transportDidTick(self)
            }
            if stopRequested.withLock({ $0 }) {
                flush()
                break
            }
        }
        socket.close()
        zapHandler?.stop()
        context.terminate()
    }

    private func receiveAll() {
        // Everything waiting is taken first, so that each message can be told whether
        // more follow (saves arriving together then commit together). Bounded so that
        // a flood of input cannot starve the outbound side.
        var burst: [(payload: [UInt8], routingID: [UInt8], keyID: String?)] = []
        while burst.count < 256 {
            let received: (Message, String?)?
            do {
                received = try socket.receive(dontWait: true, property: "User-Id")
            } catch {
                logger.warning("receive failed: \(error)")
                break
            }
            guard let (message, userID) = received else { break }
            guard message.count >= 2 else { continue }
            // A DEALER may send an empty delimiter frame (REQ-style); skip it.
            let payload = message.count >= 3 && message[1].isEmpty ? message[2] : message[1]
            burst.append((payload, message[0], userID.flatMap { $0.isEmpty ? nil : $0 }))
        }
        for (index, message) in burst.enumerated() {
            delegate?.transport(
                self, didReceive: message.payload, from: message.routingID, keyID: message.keyID,
                moreWaiting: index < burst.count - 1)
        }
    }

    private func flush() {
        let hadBacklog = Set(backlog.keys)
        for message in outbox.drain() {
            if backlog[message.routingID] != nil {
                backlog[message.routingID]!.append(message.payload)
            } else if !deliver(message.payload, to: message.routingID) {
                backlog[message.routingID] = [message.payload]
            }
        }
        for routingID in Array(backlog.keys) {
            var queue = backlog[routingID]!
            var sent = 0
            for payload in queue {
                guard deliver(payload, to: routingID) else { break }
                sent += 1
            }
            if backlog[routingID] == nil { continue }  // the peer vanished meanwhile
            queue.removeFirst(sent)
            backlog[routingID] = queue.isEmpty ? nil : queue
        }
        if !hadBacklog.isEmpty || !backlog.isEmpty {
            backlogSizes.withLock { sizes in
                sizes = backlog.mapValues(\.count)
            }
            for routingID in hadBacklog where backlog[routingID] == nil {
                delegate?.transport(self, didDrain: routingID)
            }
        }
    }

    /// Tells the delegate of the peers found gone since the last pass. Never
    /// from inside a send: a send may come from the service while it holds a
    /// lock that closing the peer's session takes again.
    private func reportVanished() {
        while let routingID = vanished.popFirst() {
            delegate?.transport(self, peerVanished: routingID)
        }
    }

    /// Sends one message; `false` when the peer cannot take it yet.
    private func deliver(_ payload: [UInt8], to routingID: [UInt8]) -> Bool {
        do {
            return try socket.send([routingID, payload], dontWait: true)
        } catch let error where error.isHostUnreachable {
            backlog[routingID] = nil
            vanished.insert(routingID)
            return true
        } catch {
            logger.warning("send failed: \(error)")
            return true
        }
    }
}

/// The CURVE set-up of the daemon's TCP endpoints.
struct TransportSecurity: Sendable {
    /// The server's secret key, Z85.
    var secretKey: String
    /// The client keys allowed in.
    var keys: KeyRing
}
