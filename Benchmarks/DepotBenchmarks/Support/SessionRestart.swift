import Foundation

/// A daemon restart under load: the daemon stops, a new one starts on the same
/// port and data, and every session of a swarm opens a new session and
/// subscribes again at once (a reconnect storm).
enum SessionRestart {
    /// What the restart measured.
    struct Outcome {
        /// Seconds from starting the new daemon until every session was subscribed again.
        var served: Double
        /// Seconds from starting the new daemon until it said it listens.
        var listening: Double
        /// SYNs the kernel dropped on full listen queues meanwhile (`nil`: not reported).
        var listenOverflows: Int?
        /// Sessions refused (an error answer to `initialize` or the subscribe).
        var refused: Int
    }

    /// Stops `daemon`, starts its replacement with `start`, and has every session of `swarm`
    /// initialize and subscribe with `subscribe(i)`; returns the new daemon and the figures.
    static func run(
        _ daemon: DaemonProcess, swarm: SessionSwarm, start: () throws -> DaemonProcess,
        subscribe: (Int) -> String
    ) throws -> (DaemonProcess, Outcome) {
        SessionScaleBenchmark.progress("\(swarm.count) sessions: restart")
        daemon.stop()
        let overflows = ListenOverflows.count()
        let began = ContinuousClock.now
        let restarted = try start()
        let listening = ContinuousClock.now - began
        let initialized = try swarm.callAll("initialize") { RawRPCClient.initializeParams(name: "s\($0)") }
        let subscribed = try swarm.callAll("results/subscribe", params: subscribe)
        let served = ContinuousClock.now - began
        let refused = zip(initialized, subscribed).filter { $0["error"] != nil || $1["error"] != nil }.count
        return (
            restarted,
            Outcome(
                served: served.seconds, listening: listening.seconds,
                listenOverflows: overflows.flatMap { before in ListenOverflows.count().map { $0 - before } },
                refused: refused)
        )
    }
}
