import CZeroMQ
import DepotProtocol
import Foundation

/// Many sessions from one process (issue 37): one ZeroMQ context with one I/O
/// thread, a ``RawDealer`` per session, driven without blocking, so that one
/// thread can ask all of them something at once and collect every answer.
final class SessionSwarm {
    /// The shared context.
    let context: UnsafeMutableRawPointer
    /// One socket per session.
    private(set) var dealers: [RawDealer] = []
    private var nextID: Int64 = 1_000_000
    private var lastHeartbeat = ContinuousClock.now

    /// The most sessions this process can hold: each DEALER costs two descriptors (its TCP
    /// connection and its mailbox), under the hard open-file limit, less room for the rest.
    static var capacity: Int {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        return (Int(min(limit.rlim_max, 1 << 20)) - 200) / 2
    }

    /// Connects `count` DEALERs to `endpoint`, the `index`th a CURVE client with `curve(index)` when that is not `nil`.
    init(
        count: Int, endpoint: String,
        curve: (Int) -> (serverKey: String, publicKey: String, secretKey: String)? = { _ in nil }
    ) throws {
        ProcessLimits.raiseDescriptorLimit()
        guard let context = zmq_ctx_new() else { throw BenchmarkError("zmq_ctx_new failed") }
        zmq_ctx_set(context, ZMQ_MAX_SOCKETS, Int32(count + 64))
        self.context = context
        dealers.reserveCapacity(count)
        for index in 0..<count {
            dealers.append(
                try RawDealer(endpoint: endpoint, curve: curve(index), sharedContext: context, unboundedReceive: true))
        }
    }

    deinit {
        close()  // every socket closes before the context terminates
        zmq_ctx_term(context)
    }

    /// The number of sessions.
    var count: Int { dealers.count }

    /// Sends `method` with `params(index)` on every session at once and waits (up to `timeout`)
    /// for each answer, skipping notifications; returns the answers, by session.
    func callAll(
        _ method: String, params: (Int) -> String? = { _ in nil }, timeout: Duration = .seconds(60)
    ) throws -> [JSONValue] {
        nextID += 1
        let id = nextID
        for (index, dealer) in dealers.enumerated() {
            try dealer.send(RawRPCClient.request(id: id, method: method, params: params(index)))
        }
        var answers = [JSONValue?](repeating: nil, count: dealers.count)
        var pending = Array(dealers.indices)
        let deadline = ContinuousClock.now + timeout
        while !pending.isEmpty {
            guard ContinuousClock.now < deadline else {
                throw BenchmarkError(
                    "\(method): \(pending.count) of \(dealers.count) sessions unanswered after \(timeout)")
            }
            var progressed = false
            var position = 0
            while position < pending.count {
                let index = pending[position]
                var answered = false
                while let json = try dealers[index].receiveIfReady({ try JSONParser.parse(Array($0)) }) {
                    progressed = true
                    if json["id"] == .int(id) {
                        answers[index] = json
                        answered = true
                        break
                    }
                }
                if answered {
                    pending.swapAt(position, pending.count - 1)
                    pending.removeLast()
                } else {
                    position += 1
                }
            }
            if !progressed { usleep(500) }
        }
        lastHeartbeat = ContinuousClock.now
        return answers.map { $0 ?? .null }
    }

    /// Waits until every session has received a message containing `needle` (a notification),
    /// discarding anything else; returns when the last one had it.
    func awaitEverySession(receiving needle: StaticString, timeout: Duration = .seconds(60)) throws
        -> ContinuousClock.Instant
    {
        var pending = Array(dealers.indices)
        var last = ContinuousClock.now
        let deadline = last + timeout
        while !pending.isEmpty {
            guard ContinuousClock.now < deadline else {
                throw BenchmarkError("\(pending.count) of \(dealers.count) sessions did not receive \(needle)")
            }
            var progressed = false
            var position = 0
            while position < pending.count {
                let dealer = dealers[pending[position]]
                var received = false
                while let found = try dealer.receiveIfReady({ RawDealer.contains($0, needle) }) {
                    progressed = true
                    if found {
                        received = true
                        break
                    }
                }
                if received {
                    last = ContinuousClock.now
                    pending.swapAt(position, pending.count - 1)
                    pending.removeLast()
                } else {
                    position += 1
                }
            }
            if !progressed { usleep(200) }
        }
        return last
    }

    /// Sends a `ping` on every session when `interval` has passed since they last sent
    /// anything (the daemon closes sessions silent for three intervals); the answers are
    /// left queued and skipped by the next read.
    func heartbeatIfDue(interval: Duration) throws {
        guard (ContinuousClock.now - lastHeartbeat).seconds >= interval.seconds * 0.8 else { return }
        try pingSlice(dealers.indices)
        lastHeartbeat = ContinuousClock.now
    }

    /// Sends a `ping` on each session of `indices`, first dropping whatever they have queued.
    func pingSlice(_ indices: Range<Int>) throws {
        for index in indices {
            while try dealers[index].receiveIfReady({ _ in true }) != nil {}
            nextID += 1
            try dealers[index].send(RawRPCClient.request(id: nextID, method: "ping"))
        }
    }

    /// Keeps every session alive for `duration`, each sending one `ping` per `interval`,
    /// spread evenly over the interval (the sessions idle, as a client at rest does).
    func idle(for duration: Duration, interval: Duration) throws {
        let tick = Duration.milliseconds(50)
        let perTick = max(1, Int((Double(count) * tick.seconds / interval.seconds).rounded(.up)))
        let end = ContinuousClock.now + duration
        var next = 0
        var wake = ContinuousClock.now
        while ContinuousClock.now < end {
            let upper = min(count, next + perTick)
            try pingSlice(next..<upper)
            next = upper == count ? 0 : upper
            wake += tick
            Thread.sleep(forTimeInterval: max(0, (wake - ContinuousClock.now).seconds))
        }
        lastHeartbeat = ContinuousClock.now
    }

    /// Reads and drops whatever every session has received so far.
    func drain() throws {
        for dealer in dealers {
            while try dealer.receiveIfReady({ _ in true }) != nil {}
        }
    }

    /// Closes every socket.
    func close() {
        for dealer in dealers { dealer.close() }
        dealers.removeAll()
    }
}
