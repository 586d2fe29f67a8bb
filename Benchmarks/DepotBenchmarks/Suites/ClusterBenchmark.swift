import DepotClient
import DepotPostgres
import DepotProtocol
import DepotStore
import Foundation
import GRDB
import Logging
import PostgresNIO

/// Issue 13's benchmark: two `depotd` on one throwaway PostgreSQL (fsync on), each a replica of the
/// cluster's log (docs/cluster.md).
///
/// Measures, in one run: a single-object `store/save` through daemon A against a raw postgres-nio
/// single-row insert transaction on the same server; and the latency from a save on A to the
/// `results/didChange` of a subscription over N rows on daemon B, beside the same figure for a
/// subscription on A itself. Then (issue 26) the log's upkeep on that store
/// (``upkeep(_:server:arguments:replica:rows:updates:saveMs:)``), and the scale-out under equal
/// per-daemon CPU quotas (``quotaScaleOut(_:server:store:)``).
struct ClusterBenchmark: Benchmark {
    static let name = "cluster"
    static let summary =
        "PostgreSQL-backed save vs raw postgres-nio insert transaction (≥ 0.5×); save on A → didChange on B p50 ≤ 1.5 ms, p99 ≤ 5 ms; CPU to apply a save ≤ 0.3× committing it; the log's upkeep (a join ≥ 0.5× raw COPY + SQLite load); under equal CPU quotas 5 daemons' deliveries ≥ 4.5× one's, writers on 3 daemons ≥ 0.8× one's commits"

    struct Report: Codable {
        var rows: Int
        var samples: Int
        var otherDaemonP50Ms: Double
        var otherDaemonP99Ms: Double
        var sameDaemonP50Ms: Double
        var sameDaemonP99Ms: Double
        var loadSeconds: Double
        var replicaCatchUpSeconds: Double
    }

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let server = try ThrowawayPostgres(directory: suite.directory.appendingPathComponent("postgres"))
        defer { server.stop() }
        let store = "postgresql://\(server.url.username)@\(server.url.host):\(server.url.port)/\(server.url.database)"
        let arguments = ["--store", store + "?schema=bench_cluster"]
        let first = try suite.startDaemon(.tcp, label: "depotd-a", extraArguments: arguments)
        defer { first.stop() }
        let writer = try await DepotConnection.connect(to: first.endpoint, timeout: .seconds(600))
        _ = try await writer.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
        let second = try suite.startDaemon(.tcp, label: "depotd-b", extraArguments: arguments)
        defer { second.stop() }
        let remote = try await DepotConnection.connect(to: second.endpoint, timeout: .seconds(600))
        let local = try await DepotConnection.connect(to: first.endpoint, timeout: .seconds(600))

        // The save against raw postgres-nio, before the big table exists (the same for both).
        let logger = Logger(label: "depot.bench.cluster")
        let raw = try await PostgresConnection.connect(
            configuration: server.url.configuration, id: 1, logger: logger)
        defer { Task { try? await raw.close() } }
        try await raw.query(
            "CREATE TABLE public.bench_items (id bigserial PRIMARY KEY, name text NOT NULL, created_at float8)",
            logger: logger)
        let measured = try await suite.sampler.measure([
            BenchmarkCase("cluster.save", unit: "save") { index in
                _ = try await writer.call(
                    StoreSave.self,
                    .init(inserted: [ItemSeed.object("saved \(index)", index: index)]))
            },
            BenchmarkCase("cluster.raw-insert", unit: "transaction") { index in
                _ = try await raw.withTransaction(logger: logger) { connection in
                    try await connection.query(
                        "INSERT INTO public.bench_items (name, created_at) VALUES (\("saved \(index)"), \(Double(index)))",
                        logger: logger)
                }
            },
        ])
        suite.record(measured)
        suite.compare("cluster.save-vs-raw-insert", measured[0], to: measured[1], target: 0.5)
        try await applyCost(
            suite, committer: first, applier: second, writer: writer, remote: remote, saves: quick ? 300 : 2_000)

        let rows = quick ? 20_000 : 1_000_000
        let samples = quick ? 50 : 300
        let loadStart = ContinuousClock.now
        try await ItemSeed.save(rows, through: writer)
        let loadSeconds = (ContinuousClock.now - loadStart).seconds
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        // Subscribing on B waits for B to have applied every load transaction.
        let catchUpStart = ContinuousClock.now
        let latest = try await writer.call(StoreHistory.self, .init(since: 0, limit: 1)).latest
        while try await remote.call(StoreHistory.self, .init(since: 0, limit: 1)).latest < latest {
            try await Task.sleep(for: .milliseconds(20))
        }
        let catchUpSeconds = (ContinuousClock.now - catchUpStart).seconds
        let onB = try await remote.call(
            ResultsSubscribe.self, .init(request: request, include: .noObjects), timeout: .seconds(600))
        let onA = try await local.call(
            ResultsSubscribe.self, .init(request: request, include: .noObjects), timeout: .seconds(600))
        let arrivalsB = ArrivalLog(remote, subscription: onB.subscription)
        let arrivalsA = ArrivalLog(local, subscription: onA.subscription)
        var generator = SystemRandomNumberGenerator()
        var otherDaemon: [Double] = []
        var sameDaemon: [Double] = []
        for sample in 0..<samples {
            let row = Int.random(in: 1...rows, using: &generator)
            let moved = ItemSeed.createdAt(0) + Double.random(in: 0..<Double(rows) * 0.5, using: &generator)
            let start = ContinuousClock.now
            _ = try await writer.call(
                StoreSave.self,
                .init(updated: [
                    UpdatedObject(
                        id: "Item/\(row)", values: ["createdAt": .string(ISO8601Text.string(seconds: moved))])
                ]))
            guard let atA = await arrivalsA.wait(for: Int64(sample + 1)),
                let atB = await arrivalsB.wait(for: Int64(sample + 1))
            else { throw BenchmarkError("no didChange for sample \(sample)") }
            sameDaemon.append((atA - start).milliseconds)
            otherDaemon.append((atB - start).milliseconds)
        }
        writer.abort()
        remote.abort()
        local.abort()
        let report = Report(
            rows: rows, samples: samples, otherDaemonP50Ms: percentile(otherDaemon, 0.5),
            otherDaemonP99Ms: percentile(otherDaemon, 0.99), sameDaemonP50Ms: percentile(sameDaemon, 0.5),
            sameDaemonP99Ms: percentile(sameDaemon, 0.99), loadSeconds: loadSeconds,
            replicaCatchUpSeconds: catchUpSeconds)
        suite.noteReport(report)
        suite.check("cluster.didChange-other-daemon-p50-ms", report.otherDaemonP50Ms, target: 1.5, .atMost, of: "ms")
        suite.check("cluster.didChange-other-daemon-p99-ms", report.otherDaemonP99Ms, target: 5, .atMost, of: "ms")
        suite.check("cluster.didChange-same-daemon-p50-ms", report.sameDaemonP50Ms, target: nil, .atMost, of: "ms")
        suite.check("cluster.didChange-same-daemon-p99-ms", report.sameDaemonP99Ms, target: nil, .atMost, of: "ms")
        first.stop()
        second.stop()

        try await upkeep(
            suite, server: server, arguments: arguments, replica: first.dataDirectory, rows: rows, updates: samples,
            saveMs: measured[0].p50 / 1_000_000)
        try await scaleOut(suite, server: server, store: store)
        try await quotaScaleOut(suite, server: server, store: store)
        try fanOut(suite, store: store)
    }

    /// The CPU a daemon spends applying another's save against what committing it cost the other:
    /// `saves` single-object inserts, one at a time, on `committer`, until `applier` has applied
    /// them all, neither with a subscriber (no fan-out on either side). Both also poll the log's
    /// head meanwhile, which counts against both.
    private func applyCost(
        _ suite: SuiteRun, committer: DaemonProcess, applier: DaemonProcess, writer: DepotConnection,
        remote: DepotConnection, saves: Int
    ) async throws {
        func applied() async throws {
            let latest = try await writer.call(StoreHistory.self, .init(since: 0, limit: 1)).latest
            while try await remote.call(StoreHistory.self, .init(since: 0, limit: 1)).latest < latest {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        try await applied()
        guard let committerStart = CPUTime.process(committer.pid), let applierStart = CPUTime.process(applier.pid)
        else {
            suite.note("apply-cost", "skipped: no /proc/PID/stat to read the daemons' CPU from")
            return
        }
        // With DEPOT_BENCH_PERF set: where each side's CPU goes (`perf report -i DIR/cluster.apply-cost.*.data`).
        let profiles = [
            PerfRecorder(pid: committer.pid, label: "cluster.apply-cost.committer"),
            PerfRecorder(pid: applier.pid, label: "cluster.apply-cost.applier"),
        ]
        let start = ContinuousClock.now
        for index in 0..<saves {
            _ = try await writer.call(
                StoreSave.self, .init(inserted: [ItemSeed.object("applied \(index)", index: index)]))
        }
        try await applied()
        profiles.forEach { $0.stop() }
        let seconds = (ContinuousClock.now - start).seconds
        let committing = ((CPUTime.process(committer.pid) ?? committerStart) - committerStart) / Double(saves)
        let applying = ((CPUTime.process(applier.pid) ?? applierStart) - applierStart) / Double(saves)
        suite.note(
            "apply-cost",
            [
                "saves": .int(Int64(saves)), "seconds": .double(seconds),
                "committerCPUMicrosecondsPerSave": .double(committing * 1_000_000),
                "applierCPUMicrosecondsPerSave": .double(applying * 1_000_000),
            ])
        suite.check(
            "cluster.apply-vs-commit-cpu", applying / committing, target: 0.3, .atMost,
            of: "CPU per save of a daemon applying it (no subscribers)",
            over: "CPU per save of the daemon committing it")
    }

    /// What keeping the log for years costs, on the store just loaded (`rows` objects, its whole
    /// history in the log), its daemons stopped:
    ///
    /// - checksum upkeep per save: ``ReplicaChecksum/delta(_:changeset:)`` of each of the latency
    ///   loop's `count` one-object updates (the log's newest entries) (their changesets read back from the log), on daemon A's replica
    ///   file, against the median single-object save (`saveMs`) — the checksum's own work, isolated;
    /// - the full checksum a daemon computes at start-up, per 100,000 rows;
    /// - a new daemon joining from the snapshot against the raw floor of the same work
    ///   (``ClusterJoin``: `COPY … TO STDOUT` plus a raw SQLite bulk load, target ≥ 0.5×) and against
    ///   one replaying the same store's log (the snapshot hidden by renaming `object_model`): time
    ///   from its start to its first subscribe answering with every row;
    /// - one prune of the whole log but its head.
    private func upkeep(
        _ suite: SuiteRun, server: ThrowawayPostgres, arguments: [String], replica: URL, rows: Int, updates count: Int,
        saveMs: Double
    ) async throws {
        var url = server.url
        url.schema = "bench_cluster"
        let reader = try PostgresReplication(url: url, node: "bench-reader")
        defer { reader.stop() }
        var head: Int64 = 0
        while let last = try reader.entries(after: head, limit: 100_000).last?.number { head = last }
        let updates = try reader.entries(after: max(0, head - Int64(count)), limit: count).compactMap {
            entry -> [UInt8]? in
            guard case .data(_, _, let changeset, _) = entry.content, !changeset.isEmpty else { return nil }
            return changeset
        }
        let (deltaMs, fullSeconds) = try Self.checksumCosts(
            replica: replica.appendingPathComponent("depot.sqlite"), changesets: updates)

        let (joinSeconds, _) = try await ClusterJoin.measure(
            suite, server: server, url: url, arguments: arguments,
            replica: replica.appendingPathComponent("depot.sqlite"), rows: rows)
        let logger = Logger(label: "depot.bench.cluster")
        let admin = try await PostgresConnection.connect(configuration: server.url.configuration, id: 2, logger: logger)
        defer { Task { try? await admin.close() } }
        try await admin.query("ALTER TABLE bench_cluster.object_model RENAME TO object_model_hidden", logger: logger)
        let replaySeconds = try await ClusterJoin.secondsToServe(
            suite, label: "depotd-replays", arguments: arguments, rows: rows)
        try await admin.query("ALTER TABLE bench_cluster.object_model_hidden RENAME TO object_model", logger: logger)

        // Every daemon is stopped: a grace of 1 ms lets the log go down to its head.
        try await Task.sleep(for: .milliseconds(50))
        let pruner = try PostgresReplication(
            url: url, node: "bench-pruner", logRetention: .count(1), logGrace: .milliseconds(1))
        defer { pruner.stop() }
        let pruneStart = ContinuousClock.now
        let pruned = try pruner.prune()
        let pruneSeconds = (ContinuousClock.now - pruneStart).seconds
        suite.note(
            "upkeep",
            [
                "rows": .int(Int64(rows)), "logEntries": .int(head), "checksumUpdates": .int(Int64(updates.count)),
                "checksumDeltaPerSaveMsP50": .double(deltaMs), "saveMsMedian": .double(saveMs),
                "fullChecksumSeconds": .double(fullSeconds),
                "fullChecksumSecondsPer100kRows": .double(fullSeconds * 100_000 / Double(max(rows, 1))),
                "joinFromSnapshotSeconds": .double(joinSeconds), "joinByReplayingLogSeconds": .double(replaySeconds),
                "prunedEntries": .int(pruned), "pruneSeconds": .double(pruneSeconds),
                "pruneMsPer10kEntries": .double(pruneSeconds * 1000 * 10_000 / Double(max(pruned, 1))),
            ])
        suite.check(
            "cluster.checksum-share-of-save", deltaMs / saveMs, target: nil, .atMost,
            of: "checksum delta per save (ms)", over: "single-object save (ms)")
        suite.check(
            "cluster.full-checksum-s-per-100k", fullSeconds * 100_000 / Double(max(rows, 1)), target: nil, .atMost,
            of: "s")
        suite.check(
            "cluster.join-snapshot-vs-replay", replaySeconds / joinSeconds, target: nil,
            of: "log replay (s)", over: "snapshot join (s)")
        suite.check(
            "cluster.prune-ms-per-10k", pruneSeconds * 1000 * 10_000 / Double(max(pruned, 1)), target: nil, .atMost,
            of: "ms")
    }

    /// On the replica file at `replica`: the median milliseconds of ``ReplicaChecksum/delta(_:changeset:)``
    /// over `changesets` (already applied there), and the seconds of one ``ReplicaChecksum/full(_:)``.
    private static func checksumCosts(replica: URL, changesets: [[UInt8]]) throws -> (Double, Double) {
        var configuration = Configuration()
        configuration.readonly = true
        let file = try DatabaseQueue(path: replica.path, configuration: configuration)
        return try file.read { db -> (Double, Double) in
            var each: [Double] = []
            for changeset in changesets {
                let start = ContinuousClock.now
                _ = try ReplicaChecksum.delta(db, changeset: changeset)
                each.append((ContinuousClock.now - start).milliseconds)
            }
            let start = ContinuousClock.now
            _ = try ReplicaChecksum.full(db)
            return (percentile(each, 0.5), (ContinuousClock.now - start).seconds)
        }
    }

    /// Saves/s with every save fanned out to `sessions` subscribed sessions per daemon: three daemons
    /// with 8 writers each against one daemon with 24, and the cluster's commits/s against raw
    /// single-row insert transactions from 24 postgres-nio connections, all in this run.
    private func scaleOut(_ suite: SuiteRun, server: ThrowawayPostgres, store: String) async throws {
        let quick = suite.options.quick
        let sessions = quick ? 20 : 100
        let seconds = quick ? 2.0 : 5.0
        ProcessLimits.raiseDescriptorLimit()
        let one = try await savesPerSecond(
            suite, store: store, schema: "bench_scale_one", daemons: 1, writersPerDaemon: 24, sessions: sessions,
            seconds: seconds)
        let three = try await savesPerSecond(
            suite, store: store, schema: "bench_scale_three", daemons: 3, writersPerDaemon: 8, sessions: sessions,
            seconds: seconds)
        let logger = Logger(label: "depot.bench.cluster")
        var connections: [PostgresConnection] = []
        for id in 0..<24 {
            connections.append(
                try await PostgresConnection.connect(configuration: server.url.configuration, id: id, logger: logger))
        }
        let opened = connections
        defer { for connection in opened { Task { try? await connection.close() } } }
        try await opened[0].query(
            "CREATE TABLE public.bench_scale (id bigserial PRIMARY KEY, name text NOT NULL)", logger: logger)
        let deadline = ContinuousClock.now + .seconds(seconds)
        let start = ContinuousClock.now
        let raw = try await withThrowingTaskGroup(of: Int.self) { group in
            for connection in opened {
                group.addTask {
                    var count = 0
                    while ContinuousClock.now < deadline {
                        _ = try await connection.withTransaction(logger: logger) { connection in
                            try await connection.query(
                                "INSERT INTO public.bench_scale (name) VALUES (\("row \(count)"))", logger: logger)
                        }
                        count += 1
                    }
                    return count
                }
            }
            return try await group.reduce(0, +)
        }
        let rawPerSecond = Double(raw) / (ContinuousClock.now - start).seconds
        suite.note(
            "scale-out",
            [
                "sessionsPerDaemon": .int(Int64(sessions)), "oneDaemon24WritersSavesPerSecond": .double(one),
                "threeDaemons8WritersSavesPerSecond": .double(three),
                "rawInsertTransactionsPerSecond24Connections": .double(rawPerSecond),
            ])
        suite.check(
            "cluster.scale-out-3-vs-1", three / one, target: 2, of: "saves/s, 3 daemons × 8 writers",
            over: "1 daemon × 24 writers")
        suite.check(
            "cluster.commits-vs-raw-24", three / rawPerSecond, target: 0.5, of: "cluster commits/s",
            over: "raw insert transactions/s, 24 connections")
    }

    /// Saves/s through `daemons` daemons on one new schema, each with `sessions` subscribed sessions.
    private func savesPerSecond(
        _ suite: SuiteRun, store: String, schema: String, daemons count: Int, writersPerDaemon: Int, sessions: Int,
        seconds: Double
    ) async throws -> Double {
        var daemons: [DaemonProcess] = []
        defer { for daemon in daemons { daemon.stop() } }
        let arguments = ["--store", store + "?schema=\(schema)", "--max-sessions", "5000"]
        for index in 0..<count {
            daemons.append(
                try suite.startDaemon(.ipc, label: "\(schema)-\(index)", extraArguments: arguments))
            if index == 0 {
                let setup = try await DepotConnection.connect(to: daemons[0].endpoint, timeout: .seconds(60))
                _ = try await setup.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
                setup.abort()
            }
        }
        var subscribers: [DepotConnection] = []
        defer { for subscriber in subscribers { subscriber.abort() } }
        let request = FetchRequest(entity: "Item", sort: [SortDescriptor(key: "createdAt")])
        for daemon in daemons {
            for _ in 0..<sessions {
                let subscriber = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(60))
                _ = try await subscriber.call(ResultsSubscribe.self, .init(request: request, include: .noObjects))
                subscribers.append(subscriber)
            }
        }
        var writers: [DepotConnection] = []
        defer { for writer in writers { writer.abort() } }
        for daemon in daemons {
            for _ in 0..<writersPerDaemon {
                writers.append(try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(60)))
            }
        }
        let deadline = ContinuousClock.now + .seconds(seconds)
        let start = ContinuousClock.now
        let saves = try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, writer) in writers.enumerated() {
                group.addTask {
                    var count = 0
                    while ContinuousClock.now < deadline {
                        _ = try await writer.call(
                            StoreSave.self,
                            .init(inserted: [ItemSeed.object("w\(index)-\(count)", index: index * 1_000_000 + count)]),
                            timeout: .seconds(60))
                        count += 1
                    }
                    return count
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(saves) / (ContinuousClock.now - start).seconds
    }

    /// One save on the first of three daemons, each with `processes` subscribed client processes:
    /// the time until the last of them all has its `results/didChange`.
    private func fanOut(_ suite: SuiteRun, store: String) throws {
        let quick = suite.options.quick
        let processes = quick ? 10 : 100
        let saves = quick ? 30 : 150
        let arguments = ["--store", store + "?schema=bench_fan_out", "--max-sessions", "5000"]
        var daemons: [DaemonProcess] = []
        defer { for daemon in daemons { daemon.stop() } }
        for index in 0..<3 {
            daemons.append(try suite.startDaemon(.ipc, label: "fan-out-\(index)", extraArguments: arguments))
            if index == 0 {
                let writer = try RawRPCClient(endpoint: daemons[0].endpoint)
                try writer.initialize()
                _ = try writer.call("model/define", params: FanOutBenchmark.model)
                _ = try writer.call(
                    "store/save", params: #"{"inserted":[{"entity":"Item","values":{"name":"a","score":0}}]}"#)
            }
        }
        // Every daemon has the object before anyone subscribes.
        usleep(500_000)
        let children = try daemons.map { daemon in
            try FanOutChildren(count: processes, arguments: ["depot", daemon.endpoint, String(saves)])
        }
        let writer = try RawRPCClient(endpoint: daemons[0].endpoint)
        try writer.initialize()
        let sent = try FanOutBenchmark.saveOneAtATime(saves, through: writer, pause: 20_000)
        var last: [Int64: Double] = [:]
        for group in children {
            for (key, milliseconds) in try group.arrivals(sentAt: sent) {
                last[key] = max(last[key] ?? 0, milliseconds)
            }
        }
        let latencies = Array(last.values)
        suite.note(
            "fan-out.3x\(processes)",
            [
                "p50Ms": .double(percentile(latencies, 0.5)), "p99Ms": .double(percentile(latencies, 0.99)),
                "saves": .int(Int64(latencies.count)),
            ])
        suite.check(
            "cluster.fan-out-3x\(processes)-p99-ms", percentile(latencies, 0.99), target: 20, .atMost,
            of: "last didChange p99 (ms)", over: "1 ms")
    }
}
