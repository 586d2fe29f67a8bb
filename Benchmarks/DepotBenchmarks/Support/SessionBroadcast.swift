import Foundation

/// Saves of the one row that every session's shared subscription holds, one at a
/// time: each save waits until the last session has its `results/didChange`
/// (latency, not a queue), then a short pause.
enum SessionBroadcast {
    /// What a run of broadcasts measured.
    struct Outcome {
        /// Per save, milliseconds from sending it until the last session had its didChange.
        var lastDelivery: [Double] = []
        /// Per save, milliseconds until the writer had its answer.
        var answer: [Double] = []
        /// The daemon's CPU seconds over the broadcasts (heartbeats between them excluded).
        var daemonCPU = 0.0
        /// The same by daemon thread name.
        var daemonThreads: [String: Double] = [:]
        /// Seconds the daemon's threads waited for a free core over the broadcasts, by thread name.
        var daemonRunQueueWait: [String: Double] = [:]
        /// Wall-clock seconds of the broadcasts (pauses included, heartbeats excluded).
        var seconds = 0.0
        /// This process's CPU seconds over the broadcasts (receiving every delivery).
        var clientCPU = 0.0
    }

    /// Broadcasts `count` saves (more until `minimum` has passed) by `writer` of `save(i)` to every
    /// session of `swarm`, keeping the sessions' heartbeats (`interval`) between saves; measures daemon `pid`.
    static func run(
        _ count: Int, minimum: Duration = .zero, swarm: SessionSwarm, writer: RawRPCClient, pid: Int32,
        interval: Duration, save: (Int) -> String
    ) throws -> Outcome {
        var outcome = Outcome()
        let end = ContinuousClock.now + minimum
        var index = -1
        while index + 1 < count || ContinuousClock.now < end {
            index += 1
            try swarm.heartbeatIfDue(interval: interval)
            let cpu = (daemon: CPUTime.process(pid) ?? 0, threads: CPUTime.threads(pid), client: CPUTime.current())
            let waits = RunQueueWait.threads(pid)
            let start = ContinuousClock.now
            _ = try writer.call("store/save", params: save(index))
            outcome.answer.append((ContinuousClock.now - start).milliseconds)
            let last = try swarm.awaitEverySession(receiving: "results/didChange")
            outcome.lastDelivery.append((last - start).milliseconds)
            Thread.sleep(forTimeInterval: 0.02)  // the daemon's work after the last delivery counts too
            outcome.daemonCPU += (CPUTime.process(pid) ?? 0) - cpu.daemon
            outcome.clientCPU += CPUTime.current() - cpu.client
            for (name, seconds) in CPUTime.threads(pid) {
                outcome.daemonThreads[name, default: 0] += seconds - (cpu.threads[name] ?? 0)
            }
            for (name, seconds) in RunQueueWait.threads(pid) {
                outcome.daemonRunQueueWait[name, default: 0] += seconds - (waits[name] ?? 0)
            }
            outcome.seconds += (ContinuousClock.now - start).seconds
        }
        return outcome
    }
}
