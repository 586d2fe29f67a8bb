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
    /// The PAIR socket reading the ROUTER's disconnects and failed accepts (``PeerDescriptors``).
    private let monitor: Socket
    /// Which peer each connection's descriptor carries (transport thread).
    private var descriptors = PeerDescriptors()
    /// Failed accepts not yet logged (transport thread): logged once a tick, not once per retry.
    private var unloggedAcceptFailures: (count: Int, endpoint: String, errno: Int32)?
    /// Accepts that failed since start (any thread).
    private let acceptFailures = Atomic<Int>(0)
    /// Fan-out messages taken from the outbox and not yet sent, in order, from `fanOutHead` (transport thread).
    private var fanOut: [OutboundMessage] = []
    private var fanOutHead = 0
    /// How many messages of `fanOut` wait for each peer: a later message to it queues behind them.
    private var fanOutPending: [[UInt8]: Int] = [:]
    /// Messages handed to ZeroMQ since start (any thread).
    private let sent = Atomic<Int>(0)
    /// The most fan-out messages sent between two looks at the input and the outbox.
    static let fanOutSlice = 256
    /// Every endpoint bound, with the port the system chose for `tcp://…:*`, in bind order.
    private(set) var boundEndpoints: [String] = []
    weak var delegate: (any TransportDelegate)?

    /// Binds every endpoint; throws on the first that fails.
    ///
    /// With `security`, every `tcp://` endpoint is a CURVE server whose handshakes
    /// a ``ZAPHandler`` decides; other endpoints (`ipc://`) are bound first, plain.
    ///
    /// `backlog` is the listen queue of each endpoint (`ZMQ_BACKLOG`): a reconnect storm of that many
    /// clients is queued by the kernel, not dropped and retried seconds later. `ioThreads` is how many
    /// ZeroMQ I/O threads move the connections' bytes.
    init(
        endpoints: [String], maxMessageSize: Int64, sendHighWaterMark: Int32, security: TransportSecurity? = nil,
        backlog: Int32 = 4096, ioThreads: Int32 = 1, logger: Logger
    ) throws(ZMQError) {
        self.logger = logger
        context = try Context(ioThreads: ioThreads)
        socket = try Socket(context: context, type: .router)
        let monitorEndpoint = "inproc://depot-router-monitor-\(UUID().uuidString)"
        do {
            try socket.monitorDisconnectsAndAcceptFailures(monitorEndpoint)
            monitor = try Socket(context: context, type: .pair)
            try monitor.setLinger(milliseconds: 0)
            try monitor.connect(monitorEndpoint)
        } catch {
            socket.close()
            throw error
        }
        try socket.setBacklog(backlog)
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
            monitor.close()
            socket.close()
            throw error
        }
    }

    deinit {
        // The sockets must close before the context terminates (when start() never ran).
        zapHandler?.stop()
        monitor.close()
        socket.close()
    }

    /// The listen queue of each endpoint (`ZMQ_BACKLOG`).
    var listenBacklog: Int32 { (try? socket.backlog()) ?? 0 }

    /// How many ZeroMQ I/O threads run.
    var ioThreads: Int32 { context.ioThreads }

    /// How many accepts failed since start (out of descriptors, mostly).
    var failedAccepts: Int { acceptFailures.load(ordering: .relaxed) }

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

    /// Sends now if on the transport thread with nothing queued ahead for the peer, else queues.
    ///
    /// Inline handlers (`ping`, `initialize`) answer on the transport thread:
    /// sending directly saves the outbox's wake-up (an eventfd write, a poll and a
    /// read per message). Anything already queued for the peer keeps its place in
    /// line; what is queued for other peers (a broadcast's fan-out) does not hold it.
    func send(_ payload: [UInt8], to routingID: [UInt8]) {
        let message = OutboundMessage(routingID: routingID, payload: payload)
        guard transportThreadID.load(ordering: .relaxed) == UInt(pthread_self()) else { return outbox.post(message) }
        // What other threads queued before it goes first, each behind its own peer's.
        if outbox.count > 0 { takeOutbox() }
        route(message)
    }

    /// Queues a transaction's fan-out with one hand-off (and at most one wake-up) to the transport thread;
    /// on the transport thread (a save committed and published where it was received), straight into
    /// the fan-out queue, which the loop sends a slice at a time once this turn is done.
    func send(contentsOf messages: [(bytes: [UInt8], peer: [UInt8])]) {
        let fanOut = messages.map { OutboundMessage(routingID: $0.peer, payload: $0.bytes, isFanOut: true) }
        guard transportThreadID.load(ordering: .relaxed) == UInt(pthread_self()) else {
            return outbox.post(contentsOf: fanOut)
        }
        if outbox.count > 0 { takeOutbox() }
        fanOut.forEach(route)
    }

    /// Messages handed to ZeroMQ since start.
    var messagesSent: Int { sent.load(ordering: .relaxed) }

    /// How many messages wait for `routingID` beyond ZeroMQ's own queue (any thread; as of the last flush).
    func backlogCount(for routingID: [UInt8]) -> Int { backlogSizes.withLock { $0[routingID] ?? 0 } }

    private func run() {
        transportThreadID.store(UInt(pthread_self()), ordering: .relaxed)
        var poller = Poller()
        let socketIndex = poller.add(socket)
        let wakeIndex = poller.add(fileDescriptor: outbox.wakeDescriptor)
        let monitorIndex = poller.add(monitor)
        var nextTick = ContinuousClock.now + .seconds(1)
        while true {
            let timeout = fanOutHead < fanOut.count ? 0 : backlog.isEmpty ? 250 : 5
            let ready: [Poller.Events]
            do {
                ready = try poller.poll(timeoutMilliseconds: timeout)
            } catch {
                logger.error("poll failed: \(error)")
                break
            }
            if ready[socketIndex].contains(.readable) {
                receiveAll()
            } else if ready[monitorIndex].contains(.readable) {
                readMonitor()
            }
            if ready[wakeIndex].contains(.readable) || !backlog.isEmpty || fanOutHead < fanOut.count { flush() }
            reportVanished()
            if ContinuousClock.now >= nextTick {
                nextTick = ContinuousClock.now + .seconds(1)
                logAcceptFailures()
                delegate?.transportDidTick(self)
            }
            if stopRequested.withLock({ $0 }) {
                repeat { flush() } while fanOutHead < fanOut.count
                break
            }
        }
        monitor.close()
        socket.close()
        zapHandler?.stop()
        context.terminate()
    }

    private func receiveAll() {
        // Everything waiting is taken first, so that each message can be told whether
        // more follow (saves arriving together then commit together). Bounded so that
        // a flood of input cannot starve the outbound side.
        var burst: [(payload: [UInt8], routingID: [UInt8], keyID: String?)] = []
        var sources: [(descriptor: Int32, routingID: [UInt8])] = []
        while burst.count < 256 {
            let received: (frames: Message, property: String?, sourceDescriptor: Int32)?
            do {
                received = try socket.receive(dontWait: true, reading: "User-Id")
            } catch {
                logger.warning("receive failed: \(error)")
                break
            }
            guard let (message, userID, descriptor) = received else { break }
            guard message.count >= 2 else { continue }
            // A DEALER may send an empty delimiter frame (REQ-style); skip it.
            let payload = message.count >= 3 && message[1].isEmpty ? message[2] : message[1]
            burst.append((payload, message[0], userID.flatMap { $0.isEmpty ? nil : $0 }))
            sources.append((descriptor, message[0]))
        }
        // Disconnects read now were reported before any message of this burst came in on a
        // reused descriptor: they are matched against the peers as known before the burst.
        readMonitor()
        for source in sources { descriptors.note(source.routingID, on: source.descriptor) }
        for (index, message) in burst.enumerated() {
            delegate?.transport(
                self, didReceive: message.payload, from: message.routingID, keyID: message.keyID,
                moreWaiting: index < burst.count - 1)
        }
    }

    /// Sends what the outbox holds (a fan-out a slice at a time) and retries the backlogs.
    private func flush() {
        let hadBacklog = Set(backlog.keys)
        takeOutbox()
        sendFanOutSlice()
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

    /// Takes everything the outbox holds: each message is sent now or queued behind its peer's.
    private func takeOutbox() {
        for message in outbox.drain() { route(message) }
    }

    /// Sends `message` now unless something older waits for its peer (then behind that);
    /// a fan-out message joins the fan-out queue, sent a slice at a time.
    ///
    /// Per peer, messages go out in the order routed (DESIGN.md §7); across peers, an
    /// answer need not wait for a broadcast to others.
    private func route(_ message: OutboundMessage) {
        let peer = message.routingID
        if message.isFanOut || fanOutPending[peer] != nil {
            fanOut.append(message)
            fanOutPending[peer, default: 0] += 1
        } else if backlog[peer] != nil {
            backlog[peer]!.append(message.payload)
        } else if !deliver(message.payload, to: peer) {
            backlog[peer] = [message.payload]
        }
    }

    /// Sends the next ``fanOutSlice`` fan-out messages (into a peer's backlog when it cannot take one).
    private func sendFanOutSlice() {
        var count = 0
        while fanOutHead < fanOut.count && count < Self.fanOutSlice {
            let message = fanOut[fanOutHead]
            fanOutHead += 1
            count += 1
            let peer = message.routingID
            if fanOutPending[peer] == 1 { fanOutPending[peer] = nil } else { fanOutPending[peer]! -= 1 }
            // Anything in the peer's backlog is older: it came from earlier slices.
            if backlog[peer] != nil {
                backlog[peer]!.append(message.payload)
            } else if !deliver(message.payload, to: peer) {
                backlog[peer] = [message.payload]
            }
        }
        if fanOutHead == fanOut.count {
            fanOut.removeAll(keepingCapacity: fanOut.count <= 65_536)
            fanOutHead = 0
        } else if fanOutHead >= 4096 && fanOutHead * 2 >= fanOut.count {
            fanOut.removeFirst(fanOutHead)
            fanOutHead = 0
        }
    }

    /// Handles the ROUTER's monitor events: a closed connection vanishes its peer
    /// at once (its session ends, freeing its slot); a failed accept (out of
    /// descriptors) is counted and logged at the next tick.
    private func readMonitor() {
        while let message = try? monitor.receive(dontWait: true) {
            guard let event = SocketEvent(message) else { continue }
            switch event.kind {
            case .disconnected:
                if let routingID = descriptors.closed(Int32(bitPattern: event.value)) {
                    backlog[routingID] = nil
                    vanished.insert(routingID)
                }
            case .acceptFailed:
                acceptFailures.add(1, ordering: .relaxed)
                let count = (unloggedAcceptFailures?.count ?? 0) + 1
                unloggedAcceptFailures = (count, event.endpoint, Int32(bitPattern: event.value))
            case .connected, .other:
                break
            }
        }
    }

    /// Logs the accepts that failed since the last tick, once: libzmq retries a failed
    /// accept at once and again (it cannot be paused without dropping every connection
    /// the endpoint accepted), so the count says how hard it is spinning.
    private func logAcceptFailures() {
        guard let (count, endpoint, number) = unloggedAcceptFailures else { return }
        unloggedAcceptFailures = nil
        logger.error(
            "cannot accept connections on \(endpoint): \(String(cString: strerror(number))) (\(count) failed accepts in the last second); clients wait until descriptors free up. Raise the open-file limit (ulimit -n) or lower --max-sessions"
        )
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
            let taken = try socket.send([routingID, payload], dontWait: true)
            if taken { sent.add(1, ordering: .relaxed) }
            return taken
        } catch let error where error.isHostUnreachable {
            backlog[routingID] = nil
            descriptors.forget(routingID)
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

/// Which peer (routing id) each accepted connection's descriptor carries, as its
/// messages said (`ZMQ_SRCFD`), so that a disconnect event, which names only the
/// descriptor, can end that peer's session at once.
struct PeerDescriptors {
    private var peers: [Int32: [UInt8]] = [:]
    private var descriptors: [[UInt8]: Int32] = [:]

    /// `routingID`'s last message came in on `descriptor`.
    mutating func note(_ routingID: [UInt8], on descriptor: Int32) {
        guard descriptor >= 0, descriptors[routingID] != descriptor else { return }
        if let old = descriptors[routingID], peers[old] == routingID { peers[old] = nil }
        if let previous = peers[descriptor] { descriptors[previous] = nil }
        peers[descriptor] = routingID
        descriptors[routingID] = descriptor
    }

    /// The connection on `descriptor` closed: the peer it carried, now forgotten.
    mutating func closed(_ descriptor: Int32) -> [UInt8]? {
        guard let routingID = peers.removeValue(forKey: descriptor) else { return nil }
        descriptors[routingID] = nil
        return routingID
    }

    /// Forgets `routingID` (found gone otherwise).
    mutating func forget(_ routingID: [UInt8]) {
        guard let descriptor = descriptors.removeValue(forKey: routingID) else { return }
        if peers[descriptor] == routingID { peers[descriptor] = nil }
    }
}
