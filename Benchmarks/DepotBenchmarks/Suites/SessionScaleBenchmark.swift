import DepotProtocol
import Foundation

/// Ten thousand sessions on one daemon (issue 37): a load generator that opens N
/// sessions from this one process (one ZeroMQ context, a DEALER each, the
/// open-file limit raised, heartbeats kept) against a `depotd` on tcp with its
/// default heartbeat, and measures, for each N of `--sessions`:
///
/// - memory per idle session against a plain ROUTER's per connection (a child
///   process, ``RouterChild``), and idle CPU while every session pings once per
///   heartbeat interval;
/// - a broadcast to every session through one shared subscription: the last
///   `results/didChange` p50/p99 and the daemon's CPU per delivery (by thread);
/// - meanwhile a `ping` and a save of an unwatched row from another session,
///   p99 against the same with no broadcast;
/// - memory per shared and per distinct subscription;
/// - a restart with every session reconnecting and subscribing again: time until
///   all are served, listen-queue overflows;
///
/// and for each N of `--curve-sessions` the same restart with CURVE keys, and a
/// save by one owner with N owner-scoped sessions subscribed against none
/// (``SessionScaleBenchmark/measureScoped(_:suite:)``).
///
/// The targets are the issue's for 10,000 sessions. One process holds at most
/// ``SessionSwarm/capacity`` sessions (two descriptors each): a larger N is
/// measured at that, and the figures are named by the N measured.
struct SessionScaleBenchmark: Benchmark {
    static let name = "sessions"
    static let summary =
        "N sessions from one process (1k/5k/10k): broadcast last didChange p50 ≤ 100 ms, p99 ≤ 250 ms, ≤ 10 µs CPU/delivery; ping/unwatched save p99 ≤ 2× during it; scoped save p99 ≤ 1.5×; restart served ≤ 5 s, 0 overflows; idle CPU ≤ 3%; memory ≤ ROUTER + 4 KB/session, ≤ 8 KB/distinct subscription"

    static let model = """
        {"entities":[{"name":"Item","attributes":[
          {"name":"owner","type":"string","indexed":true},{"name":"score","type":"integer","indexed":true}]},
          {"name":"Other","attributes":[{"name":"n","type":"integer"}]}]}
        """
    /// The one request every session subscribes to (one shared result set, or one per owner scope).
    static let sharedSubscription = #"{"request":{"entity":"Item","sort":[{"key":"score"}]},"include":"none"}"#
    /// A save of Item/1 (in every shared set; owner u0's).
    static func saveWatched(_ index: Int) -> String {
        #"{"updated":[{"id":"Item/1","values":{"score":\#(index + 1_000)}}]}"#
    }
    /// A save of a row no session watches.
    static func saveUnwatched(_ index: Int) -> String { #"{"updated":[{"id":"Other/1","values":{"n":\#(index)}}]}"# }

    func run(_ suite: SuiteRun) async throws {
        ProcessLimits.raiseDescriptorLimit()
        for requested in suite.options.sessions.plain where requested > 0 {
            try measurePlain(min(requested, SessionSwarm.capacity), suite: suite)
        }
        for requested in suite.options.sessions.curve {
            try measureScoped(min(requested, SessionSwarm.capacity), suite: suite)
        }
    }

    private func measurePlain(_ count: Int, suite: SuiteRun) throws {
        let key = "sessions.\(count)"
        var note: [String: JSONValue] = ["sessions": .int(Int64(count))]
        Self.progress("\(count) sessions: plain ROUTER baseline")
        let router = try routerBaseline(count)
        note["router"] = [
            "connectSeconds": .double(router.connect), "bytesPerConnection": .double(router.perConnection),
        ]
        print("\(key): plain ROUTER \(String(format: "%.0f", router.perConnection)) B/connection")

        var daemon = try DaemonProcess(
            executable: suite.options.depotd, dataDirectory: suite.directory.appendingPathComponent("plain-\(count)"),
            transport: .tcp, extraArguments: suite.options.daemonArguments + ["--max-sessions", String(count + 64)],
            heartbeat: nil)
        let endpoint = daemon.endpoint
        defer { daemon.stop() }
        let setup = try RawRPCClient(endpoint: endpoint)
        try setup.initialize(name: "setup")
        _ = try setup.call("model/define", params: Self.model)
        let items = (0..<10).map { #"{"owner":"u\#($0)","score":\#($0)}"# }.joined(separator: ",")
        _ = try setup.call("store/batchInsert", params: #"{"entity":"Item","objects":[\#(items)]}"#)
        _ = try setup.call("store/batchInsert", params: #"{"entity":"Other","objects":[{"n":0}]}"#)
        let rssBefore = Self.rss(daemon.pid)

        // Connect every session at once, then let them idle, heartbeating.
        Self.progress("\(count) sessions: connect, depotd pid \(daemon.pid)")
        let began = ContinuousClock.now
        let swarm = try SessionSwarm(count: count, endpoint: endpoint)
        let opened = try swarm.callAll("initialize") { RawRPCClient.initializeParams(name: "s\($0)") }
        note["connectSeconds"] = .double((ContinuousClock.now - began).seconds)
        note["refused"] = .int(Int64(opened.filter { $0["error"] != nil }.count))
        let interval = Duration.seconds(opened.first?["result"]?["heartbeatInterval"]?.doubleValue ?? 10)
        Thread.sleep(forTimeInterval: 1)
        let perSession = (Self.rss(daemon.pid) - rssBefore) / Double(count)
        suite.check(
            "\(key).memory.idle-session-over-router-kb", (perSession - router.perConnection) / 1024, target: 4,
            .atMost, of: "daemon RSS per idle session − plain ROUTER's per connection (KB)")
        note["bytesPerIdleSession"] = .double(perSession)

        let idle = try profiled("idle", pid: daemon.pid, count: count, suite: suite) {
            try Self.cpu(of: daemon.pid) {
                try swarm.idle(for: .seconds(suite.options.sessions.idleSeconds), interval: interval)
            }
        }
        suite.check(
            "\(key).idle.cpu-percent", idle.percent, target: 3, .atMost,
            of: "daemon CPU, % of one core, every session pinging once per \(interval)")
        note["idle"] = idle.json

        // One shared subscription on every session.
        var rss = Self.rss(daemon.pid)
        try Self.expectNoErrors(swarm.callAll("results/subscribe") { _ in Self.sharedSubscription }, "subscribe")
        Thread.sleep(forTimeInterval: 0.5)
        note["bytesPerSharedSubscription"] = .double((Self.rss(daemon.pid) - rss) / Double(count))

        // Another session's ping and unwatched save, with no broadcast, then during broadcasts.
        try swarm.heartbeatIfDue(interval: .zero)
        let quiet = try SessionProbe(endpoint: endpoint, save: Self.saveUnwatched)  // 5 s, as the broadcasts beside it
        Thread.sleep(forTimeInterval: 5)
        let alone = try quiet.stop()
        // A writer session of its own, opened now: the setup session has been silent past its heartbeat.
        let writer = try RawRPCClient(endpoint: endpoint)
        try writer.initialize(name: "writer")
        let broadcasts = suite.options.sessions.broadcasts
        let broadcast = try profiled("broadcast", pid: daemon.pid, count: count, suite: suite) {
            try SessionBroadcast.run(
                broadcasts, swarm: swarm, writer: writer, pid: daemon.pid, interval: interval, save: Self.saveWatched)
        }
        let deliveries = Double(broadcasts * count)
        suite.check(
            "\(key).broadcast.last-didChange.p50-ms", percentile(broadcast.lastDelivery, 0.5), target: 100, .atMost,
            of: "save → last session's results/didChange, p50 (ms)")
        suite.check(
            "\(key).broadcast.last-didChange.p99-ms", percentile(broadcast.lastDelivery, 0.99), target: 250,
            .atMost, of: "save → last session's results/didChange, p99 (ms)")
        suite.check(
            "\(key).broadcast.cpu-per-delivery-us", broadcast.daemonCPU * 1e6 / deliveries, target: 10, .atMost,
            of: "daemon CPU per didChange delivered (µs)")
        note["broadcast"] = [
            "saves": .int(Int64(broadcasts)), "lastDeliveryMs": .array(broadcast.lastDelivery.map { .double($0) }),
            "writerAnswerP50Ms": .double(percentile(broadcast.answer, 0.5)),
            "daemonMicrosPerDeliveryByThread": Self.perDelivery(broadcast.daemonThreads, deliveries),
            "clientMicrosPerDelivery": .double(broadcast.clientCPU * 1e6 / deliveries),
            "seconds": .double(broadcast.seconds),
            "daemonCPUSecondsByThread": .object(broadcast.daemonThreads.mapValues { .double($0) }),
            "daemonRunQueueWaitSecondsByThread": .object(broadcast.daemonRunQueueWait.mapValues { .double($0) }),
        ]

        let probe = try SessionProbe(endpoint: endpoint, save: Self.saveUnwatched)
        let during = try profiled("broadcast-probe", pid: daemon.pid, count: count, suite: suite) {
            _ = try SessionBroadcast.run(
                broadcasts, minimum: .seconds(5), swarm: swarm, writer: writer, pid: daemon.pid, interval: interval
            ) {
                Self.saveWatched(broadcasts + $0)
            }
            return try probe.stop()
        }
        for (name, quietValues, busyValues) in [
            ("ping", alone.pings, during.pings), ("save", alone.saves, during.saves),
        ] {
            let (quietP99, busyP99) = (percentile(quietValues, 0.99), percentile(busyValues, 0.99))
            suite.check(
                "\(key).broadcast.other-\(name).p99-ratio", busyP99 / quietP99, target: 2, .atMost,
                of: "another session's \(name == "ping" ? "ping" : "unwatched save") p99 during broadcasts",
                over: "with none")
            note["other-\(name)"] = [
                "quietP99Ms": .double(quietP99), "broadcastP99Ms": .double(busyP99),
                "quietP50Ms": .double(percentile(quietValues, 0.5)),
                "broadcastP50Ms": .double(percentile(busyValues, 0.5)),
                "samples": .array([.int(Int64(quietValues.count)), .int(Int64(busyValues.count))]),
            ]
        }

        // A distinct subscription on every session (none matching a row).
        Self.progress("\(count) sessions: distinct subscriptions")
        try swarm.heartbeatIfDue(interval: .zero)
        rss = Self.rss(daemon.pid)
        try Self.expectNoErrors(
            swarm.callAll("results/subscribe") {
                #"{"request":{"entity":"Item","predicate":"score == \#(1_000_000 + $0)","sort":[{"key":"score"}]},"include":"none"}"#
            }, "distinct subscribe")
        Thread.sleep(forTimeInterval: 0.5)
        let perDistinct = (Self.rss(daemon.pid) - rss) / Double(count)
        suite.check(
            "\(key).memory.distinct-subscription-kb", perDistinct / 1024, target: 8, .atMost,
            of: "daemon RSS per distinct subscription (KB)")

        // A restart: every session back and subscribed.
        var restartProfile: PhaseProfile?
        let (restarted, restart) = try SessionRestart.run(
            daemon, swarm: swarm,
            start: {
                let started = try DaemonProcess(
                    executable: suite.options.depotd,
                    dataDirectory: suite.directory.appendingPathComponent("plain-\(count)"),
                    transport: .tcp,
                    extraArguments: suite.options.daemonArguments + ["--max-sessions", String(count + 64)],
                    listen: endpoint, heartbeat: nil)
                restartProfile = try startProfile("restart", pid: started.pid, count: count, suite: suite)
                return started
            }, subscribe: { _ in Self.sharedSubscription })
        finish(restartProfile, "restart", count: count, suite: suite)
        daemon = restarted
        record(restart, key: key, suite: suite, note: &note)
        suite.note(key, .object(note))
    }

    /// Memory per connection and connect time of `count` DEALERs on a plain ROUTER.
    private func routerBaseline(_ count: Int) throws -> (connect: Double, perConnection: Double) {
        let router = try RouterChild()
        defer { router.stop() }
        Thread.sleep(forTimeInterval: 0.3)
        let before = Self.rss(router.pid)
        let began = ContinuousClock.now
        let swarm = try SessionSwarm(count: count, endpoint: router.endpoint)
        _ = try swarm.callAll("ping")  // the echo of each request is its answer
        let connect = (ContinuousClock.now - began).seconds
        Thread.sleep(forTimeInterval: 1)
        let perConnection = (Self.rss(router.pid) - before) / Double(count)
        swarm.close()
        return (connect, perConnection)
    }

    /// Records a restart's figures as checks and in `note`.
    func record(_ restart: SessionRestart.Outcome, key: String, suite: SuiteRun, note: inout [String: JSONValue]) {
        suite.check(
            "\(key).restart.served-s", restart.served, target: 5, .atMost,
            of: "new daemon started → every session initialized and subscribed again (s)")
        suite.check(
            "\(key).restart.listen-overflows", Double(restart.listenOverflows ?? -1), target: 0, .atMost,
            of: "SYNs dropped on a full listen queue (TcpExt ListenOverflows delta)")
        note["restart"] = [
            "servedSeconds": .double(restart.served), "listeningSeconds": .double(restart.listening),
            "listenOverflows": restart.listenOverflows.map { .int(Int64($0)) } ?? .null,
            "refused": .int(Int64(restart.refused)),
        ]
    }

    /// Runs `body`, recording a perf profile of `pid` meanwhile when `--profile` is on.
    func profiled<T>(_ phase: String, pid: Int32, count: Int, suite: SuiteRun, _ body: () throws -> T) throws -> T {
        Self.progress("\(count) sessions: \(phase), depotd pid \(pid)")
        let profile = try startProfile(phase, pid: pid, count: count, suite: suite)
        let result = try body()
        finish(profile, phase, count: count, suite: suite)
        return result
    }

    /// A perf profile of `pid` from now, when `--profile` is on.
    func startProfile(_ phase: String, pid: Int32, count: Int, suite: SuiteRun) throws -> PhaseProfile? {
        guard suite.options.sessions.profile else { return nil }
        return try PhaseProfile(
            pid: pid, phase: "\(phase)-\(count)",
            directory: URL(fileURLWithPath: "/tmp/depot-sessions-profiles-\(getpid())"))
    }

    /// Stops `profile` and prints and notes its summary.
    func finish(_ profile: PhaseProfile?, _ phase: String, count: Int, suite: SuiteRun) {
        guard let profile else { return }
        let summary = profile.stop()
        print("profile \(phase) at \(count) sessions (\(profile.file.path)):\n  " + summary.joined(separator: "\n  "))
        suite.note("profile.\(count).\(phase)", .array(summary.map { .string($0) }))
    }

    /// The daemon's CPU while `body` runs: share of one core, and by thread.
    static func cpu(of pid: Int32, _ body: () throws -> Void) throws -> (percent: Double, json: JSONValue) {
        let (before, threads) = (CPUTime.process(pid) ?? 0, CPUTime.threads(pid))
        let began = ContinuousClock.now
        try body()
        let wall = (ContinuousClock.now - began).seconds
        let used = (CPUTime.process(pid) ?? 0) - before
        var byThread: [String: JSONValue] = [:]
        for (name, seconds) in CPUTime.threads(pid) {
            byThread[name] = .double(100 * (seconds - (threads[name] ?? 0)) / wall)
        }
        return (
            100 * used / wall,
            ["percent": .double(100 * used / wall), "seconds": .double(wall), "percentByThread": .object(byThread)]
        )
    }

    /// CPU seconds by thread as microseconds per delivery.
    static func perDelivery(_ threads: [String: Double], _ deliveries: Double) -> JSONValue {
        .object(threads.filter { $0.value > 0 }.mapValues { .double($0 * 1e6 / deliveries) })
    }

    /// Says on standard error which phase starts (a long run's progress).
    static func progress(_ text: String) {
        FileHandle.standardError.write(
            Data("[sessions \(ISO8601Text.string(seconds: Date().timeIntervalSince1970))] \(text)\n".utf8))
    }

    /// Resident bytes of `pid`.
    static func rss(_ pid: Int32) -> Double { Double(ProcessMemory.sample(pid: pid)?.residentBytes ?? 0) }

    /// Throws the first error answer among `answers`.
    static func expectNoErrors(_ answers: [JSONValue], _ what: String) throws {
        if let failed = answers.first(where: { $0["error"] != nil || $0["result"] == nil }) {
            throw BenchmarkError("\(what) failed: \(failed.excerpt(limit: 300))")
        }
    }
}
