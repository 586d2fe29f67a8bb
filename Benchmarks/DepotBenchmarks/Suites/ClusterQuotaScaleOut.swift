import DepotClient
import DepotProtocol
import Foundation
import Synchronization

/// The cluster's scale-out as separate machines would show it (issue 26): every daemon confined to
/// the same CPU quota (``CPUQuotaGroup``), PostgreSQL and the clients (this process) outside the
/// quotas, every process's CPU reported so the reader sees what bound the run.
extension ClusterBenchmark {
    /// One run of ``quotaRun(_:store:postgres:daemons:cores:sessions:seconds:)``.
    struct QuotaRun: Codable {
        var daemons: Int
        var coresPerDaemon: Double
        var sessionsPerDaemon: Int
        /// Fan-out load: 4 writers on the first daemon only; every session subscribed to every save.
        var fanOutSavesPerSecond: Double
        var deliveriesPerSecond: Double
        /// Writes spread: 4 writers on every daemon.
        var spreadCommitsPerSecond: Double
        /// CPU cores each daemon used in each phase (its quota bounds it), and throttled seconds.
        var fanOutDaemonCores: [Double]
        var spreadDaemonCores: [Double]
        var throttledSeconds: [Double]
        /// This process (every client) and PostgreSQL, cores, over both phases.
        var clientCores: Double
        var postgresCores: Double
    }

    /// Fan-out and spread writes under equal per-daemon quotas, 1 and 3 daemons (and 5 in a full
    /// run); skipped with a note where cgroup v1's `cpu` controller cannot be written.
    func quotaScaleOut(_ suite: SuiteRun, server: ThrowawayPostgres, store: String) async throws {
        guard CPUQuotaGroup.isAvailable else {
            suite.note("quota-scale-out", "skipped: no writable cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
            return
        }
        let quick = suite.options.quick
        let cores = 0.25
        let sessions = quick ? 20 : 100
        let seconds = quick ? 2.0 : 5.0
        var runs: [QuotaRun] = []
        for count in quick ? [1, 3] : [1, 3, 5] {
            runs.append(
                try await quotaRun(
                    suite, store: store, postgres: server, daemons: count, cores: cores,
                    sessions: sessions, seconds: seconds))
        }
        suite.note("quota-scale-out", (try? JSONCoding.encode(runs)) ?? .null)
        let one = runs[0]
        if let three = runs.first(where: { $0.daemons == 3 }), let committer = three.fanOutDaemonCores.first,
            committer > 0
        {
            // Both fan each save out to their own sessions too: this bounds applying from above.
            let appliers = three.fanOutDaemonCores.dropFirst()
            suite.check(
                "cluster.quota-apply-vs-commit-cpu", appliers.reduce(0, +) / Double(appliers.count) / committer,
                target: nil, .atMost, of: "CPU of a daemon applying the saves and fanning them out",
                over: "of the daemon committing them and fanning them out")
        }
        for run in runs.dropFirst() {
            suite.check(
                "cluster.quota-fan-out-\(run.daemons)-vs-1", run.deliveriesPerSecond / one.deliveriesPerSecond,
                target: run.daemons == 5 ? 4.5 : nil,
                of: "deliveries/s, \(run.daemons) daemons at \(cores) core", over: "1 daemon at \(cores) core")
            suite.check(
                "cluster.quota-spread-writes-\(run.daemons)-vs-1",
                run.spreadCommitsPerSecond / one.spreadCommitsPerSecond, target: run.daemons == 3 ? 0.8 : nil,
                of: "commits/s, writers on \(run.daemons) daemons", over: "writers on 1 daemon")
        }
    }

    /// `count` daemons on a new schema, each in a group of `cores`, with `sessions` subscribed
    /// sessions each: saves/s and didChange deliveries/s with the writers on the first daemon, then
    /// commits/s with writers on every daemon.
    private func quotaRun(
        _ suite: SuiteRun, store: String, postgres: ThrowawayPostgres, daemons count: Int, cores: Double, sessions: Int,
        seconds: Double
    ) async throws -> QuotaRun {
        let schema = "bench_quota_\(count)"
        var daemons: [DaemonProcess] = []
        var groups: [CPUQuotaGroup] = []
        defer {
            for daemon in daemons { daemon.stop() }
            for group in groups { group.remove() }
        }
        let arguments = ["--store", store + "?schema=\(schema)", "--max-sessions", "5000"]
        for index in 0..<count {
            let daemon = try suite.startDaemon(.ipc, label: "\(schema)-\(index)", extraArguments: arguments)
            daemons.append(daemon)
            if index == 0 {
                let setup = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(60))
                _ = try await setup.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
                setup.abort()
            }
            let group = try CPUQuotaGroup(name: "depot-bench-\(schema)-\(index)-\(getpid())", cores: cores)
            groups.append(group)
            try group.add(daemon.pid)
        }
        let delivered = Tally()
        var subscribers: [DepotConnection] = []
        var listeners: [Task<Void, Never>] = []
        defer {
            for listener in listeners { listener.cancel() }
            for subscriber in subscribers { subscriber.abort() }
        }
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        for daemon in daemons {
            for _ in 0..<sessions {
                let subscriber = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(60))
                let stream = subscriber.notifications()
                _ = try await subscriber.call(ResultsSubscribe.self, .init(request: request, include: .noObjects))
                listeners.append(
                    Task {
                        for await note in stream where note.method == ResultsDidChange.name {
                            delivered.count.add(1, ordering: .relaxed)
                        }
                    })
                subscribers.append(subscriber)
            }
        }
        var writers: [[DepotConnection]] = []
        defer { for writer in writers.joined() { writer.abort() } }
        for daemon in daemons {
            var own: [DepotConnection] = []
            for _ in 0..<4 { own.append(try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(60))) }
            writers.append(own)
        }
        let pids = daemons.map(\.pid)
        let clientStart = CPUTime.current()
        let postgresStart = postgres.cpuSeconds() ?? 0
        let wallStart = ContinuousClock.now

        // Fan-out: writers on the first daemon only.
        var cpu = pids.map { CPUTime.process($0) ?? 0 }
        let deliveredBefore = delivered.count.load(ordering: .relaxed)
        var phase = ContinuousClock.now
        let fanOutSaves = try await Self.save(through: writers[0], for: seconds, tag: "f")
        // Deliveries still in flight count: wait briefly for the daemons to drain.
        try await Task.sleep(for: .milliseconds(500))
        var elapsed = (ContinuousClock.now - phase).seconds
        let deliveries = delivered.count.load(ordering: .relaxed) - deliveredBefore
        let fanOutCores = zip(pids, cpu).map { ((CPUTime.process($0) ?? 0) - $1) / elapsed }

        // Spread: writers on every daemon.
        cpu = pids.map { CPUTime.process($0) ?? 0 }
        phase = ContinuousClock.now
        let spreadSaves = try await Self.save(through: Array(writers.joined()), for: seconds, tag: "s")
        elapsed = (ContinuousClock.now - phase).seconds
        let spreadCores = zip(pids, cpu).map { ((CPUTime.process($0) ?? 0) - $1) / elapsed }
        let wall = (ContinuousClock.now - wallStart).seconds
        return QuotaRun(
            daemons: count, coresPerDaemon: cores, sessionsPerDaemon: sessions,
            fanOutSavesPerSecond: Double(fanOutSaves) / seconds,
            deliveriesPerSecond: Double(deliveries) / (seconds + 0.5),
            spreadCommitsPerSecond: Double(spreadSaves) / seconds, fanOutDaemonCores: fanOutCores,
            spreadDaemonCores: spreadCores, throttledSeconds: groups.map { $0.throttled().seconds },
            clientCores: (CPUTime.current() - clientStart) / wall,
            postgresCores: ((postgres.cpuSeconds() ?? 0) - postgresStart) / wall)
    }

    /// Saves one new object at a time through each of `writers` for `seconds`; the saves made.
    private static func save(through writers: [DepotConnection], for seconds: Double, tag: String) async throws
        -> Int
    {
        let deadline = ContinuousClock.now + .seconds(seconds)
        return try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, writer) in writers.enumerated() {
                group.addTask {
                    var count = 0
                    while ContinuousClock.now < deadline {
                        _ = try await writer.call(
                            StoreSave.self,
                            .init(inserted: [
                                ItemSeed.object("\(tag)\(index)-\(count)", index: index * 1_000_000 + count)
                            ]),
                            timeout: .seconds(60))
                        count += 1
                    }
                    return count
                }
            }
            return try await group.reduce(0, +)
        }
    }
}

/// A count shared by tasks.
private final class Tally: Sendable {
    let count = Atomic<Int>(0)
}
