import DepotProtocol
import Foundation

extension SessionScaleBenchmark {
    /// With CURVE keys, `count` owners each with a key scoped `owner == $keyName`
    /// (``OwnerScopedKeys``): the CURVE connect storm; a save by owner u0 with every
    /// owner's session subscribed to the same request, p99 against none; then a
    /// restart with every CURVE session reconnecting and subscribing again.
    func measureScoped(_ count: Int, suite: SuiteRun) throws {
        let key = "sessions.\(count).curve"
        var note: [String: JSONValue] = ["sessions": .int(Int64(count))]
        let keys = try OwnerScopedKeys(
            owners: count, directory: suite.directory.appendingPathComponent("keys-\(count)"))
        let arguments = suite.options.daemonArguments + keys.daemonArguments + ["--max-sessions", String(count + 64)]
        let directory = suite.directory.appendingPathComponent("curve-\(count)")
        var daemon = try DaemonProcess(
            executable: suite.options.depotd, dataDirectory: directory, transport: .tcp, extraArguments: arguments,
            heartbeat: nil)
        let endpoint = daemon.endpoint
        defer { daemon.stop() }
        let admin = try RawRPCClient(endpoint: endpoint, curve: keys.client(keys.admin))
        try admin.initialize(name: "setup")
        _ = try admin.call("model/define", params: Self.model)
        // Item/1 is u0's; every owner has one row.
        for start in stride(from: 0, to: count, by: 5_000) {
            let rows = (start..<min(count, start + 5_000)).map { #"{"owner":"u\#($0)","score":\#($0)}"# }
            _ = try admin.call(
                "store/batchInsert", params: #"{"entity":"Item","objects":[\#(rows.joined(separator: ","))]}"#)
        }
        Self.progress("\(count) CURVE sessions: connect, depotd pid \(daemon.pid)")
        let connectProfile = try startProfile("connect-curve", pid: daemon.pid, count: count, suite: suite)
        let began = ContinuousClock.now
        let swarm = try SessionSwarm(count: count, endpoint: endpoint) { keys.client(keys.members[$0]) }
        let opened = try swarm.callAll("initialize") { RawRPCClient.initializeParams(name: "u\($0)") }
        note["connectSeconds"] = .double((ContinuousClock.now - began).seconds)
        note["refused"] = .int(Int64(opened.filter { $0["error"] != nil }.count))
        finish(connectProfile, "connect-curve", count: count, suite: suite)
        // u0 saves with every session connected, none subscribed; then all subscribed.
        let owner = try RawRPCClient(endpoint: endpoint, curve: keys.client(keys.members[0]))
        try owner.initialize(name: "u0")
        let saves = 1_000
        _ = try SessionLoad.saveLatencies(200, writer: owner) { Self.saveWatched(2 * saves + $0) }  // warm-up
        let alone = try SessionLoad.saveLatencies(saves, writer: owner, params: Self.saveWatched)

        try Self.expectNoErrors(swarm.callAll("results/subscribe") { _ in Self.sharedSubscription }, "subscribe")
        let scoped = try profiled("scoped-save", pid: daemon.pid, count: count, suite: suite) {
            try SessionLoad.saveLatencies(saves, writer: owner) { Self.saveWatched(saves + $0) }
        }
        try swarm.drain()  // u0's session heard of every save
        let (aloneP99, scopedP99) = (percentile(alone, 0.99), percentile(scoped, 0.99))
        suite.check(
            "\(key).scoped-save.p99-ratio", scopedP99 / aloneP99, target: 1.5, .atMost,
            of: "save p99 by one owner with \(count) owner-scoped sessions subscribed", over: "none")
        note["scopedSave"] = [
            "noneP99Ms": .double(aloneP99), "subscribedP99Ms": .double(scopedP99),
            "noneP50Ms": .double(percentile(alone, 0.5)), "subscribedP50Ms": .double(percentile(scoped, 0.5)),
            "saves": .int(Int64(saves)),
        ]

        var restartProfile: PhaseProfile?
        let (restarted, restart) = try SessionRestart.run(
            daemon, swarm: swarm,
            start: {
                let started = try DaemonProcess(
                    executable: suite.options.depotd, dataDirectory: directory, transport: .tcp,
                    extraArguments: arguments, listen: endpoint, heartbeat: nil)
                restartProfile = try startProfile("restart-curve", pid: started.pid, count: count, suite: suite)
                return started
            }, subscribe: { _ in Self.sharedSubscription })
        finish(restartProfile, "restart-curve", count: count, suite: suite)
        daemon = restarted
        record(restart, key: key, suite: suite, note: &note)
        suite.note(key, .object(note))
    }
}
