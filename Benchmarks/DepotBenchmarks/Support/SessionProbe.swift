import Foundation

/// Another session's ordinary traffic, on a thread of its own while the main
/// thread loads the daemon: a `ping`, then a save of a row no one watches,
/// paced `pause` apart, each answer's latency kept (issue 37: they must not wait
/// behind a broadcast to other sessions).
final class SessionProbe: @unchecked Sendable {
    // @unchecked: the clients are touched only on the probe thread; the figures under `lock`.
    private let lock = NSLock()
    private var pings: [Double] = []
    private var saves: [Double] = []
    private var stopping = false
    private var failure: (any Error)?
    private let finished = DispatchSemaphore(value: 0)
    private let ready = DispatchSemaphore(value: 0)

    /// Opens a session on `endpoint` (with `curve` keys when given) and starts probing; `save(i)` is the
    /// `store/save` params of the `i`th save.
    init(
        endpoint: String, curve: (serverKey: String, publicKey: String, secretKey: String)? = nil,
        pause: Duration = .milliseconds(5), save: @escaping @Sendable (Int) -> String
    ) throws {
        let thread = Thread { [self] in
            defer { finished.signal() }
            do {
                let client = try RawRPCClient(endpoint: endpoint, curve: curve)
                try client.initialize(name: "probe")
                ready.signal()
                var index = 0
                while !lock.withLock({ stopping }) {
                    index += 1
                    let ping = try Self.time { _ = try client.call("ping") }
                    let saved = try Self.time { _ = try client.call("store/save", params: save(index)) }
                    lock.withLock {
                        pings.append(ping)
                        saves.append(saved)
                    }
                    Thread.sleep(forTimeInterval: pause.seconds)
                }
            } catch {
                lock.withLock { failure = error }
                ready.signal()
            }
        }
        thread.name = "session-probe"
        thread.start()
        ready.wait()
        if let failure = lock.withLock({ failure }) { throw failure }
    }

    /// Stops probing; the latencies in milliseconds of every ping and save answered.
    func stop() throws -> (pings: [Double], saves: [Double]) {
        lock.withLock { stopping = true }
        finished.wait()
        return try lock.withLock {
            if let failure { throw failure }
            return (pings, saves)
        }
    }

    private static func time(_ body: () throws -> Void) throws -> Double {
        let start = ContinuousClock.now
        try body()
        return (ContinuousClock.now - start).milliseconds
    }
}
