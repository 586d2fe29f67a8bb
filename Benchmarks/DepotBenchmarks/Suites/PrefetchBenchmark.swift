import CZeroMQ
import DepotProtocol
import Foundation
import GRDBSQLite

/// Live relationships (DESIGN.md §5 "Prefetching", §7 "Live relationships"), issue 35's rows,
/// over 100,000 Matches (10,000 `--quick`) whose `homeTeam` is one of 1,000 Teams; Team 1 is
/// the home team of the first 1,000 Matches:
///
/// - subscribe with `prefetch: ["homeTeam"]` ÷ (the same subscribe without it + a fetch of
///   the 1,000 Teams) (target ≤ 1.5×);
/// - a save that no live graph reaches (a Team no Match names), with 100 prefetching
///   subscriptions in 100 sessions, ÷ the same save with none (≤ 1.3×);
/// - a rename of Team 1, shown by 1,000 Match rows in each of those 100 subscriptions: each
///   set gets one notification; the last received, p50 ≤ 3 ms and p99 ≤ 10 ms after the save.
struct PrefetchBenchmark: Benchmark {
    static let name = "prefetch"
    static let summary =
        "prefetching subscribe vs plain + related fetch (≤ 1.5×); unreached save with 100 prefetching sets (≤ 1.3×); rename seen by 100 sets: last didChange p50 ≤ 3 ms, p99 ≤ 10 ms"

    static let model = #"""
        {"entities": [
          {"name": "Team", "attributes": [{"name": "teamName", "type": "string"}],
           "relationships": [{"name": "homeMatches", "destination": "Match", "toMany": true, "inverse": "homeTeam"}]},
          {"name": "Match", "attributes": [{"name": "score", "type": "integer", "indexed": true}],
           "relationships": [{"name": "homeTeam", "destination": "Team", "inverse": "homeMatches"}]}
        ]}
        """#

    /// Teams, and the Matches whose home team is Team 1.
    static let teams = 1_000
    static let shown = 1_000

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let matches = quick ? 10_000 : 100_000
        let sessions = 100
        ProcessLimits.raiseDescriptorLimit()
        let daemon = try suite.startDaemon(.ipc, extraArguments: ["--max-sessions", "1000"])
        defer { daemon.stop() }
        let writer = try RawRPCClient(endpoint: daemon.endpoint)
        try writer.initialize(name: "prefetch writer")
        _ = try writer.call("model/define", params: Self.model)
        // One Team beyond those the Matches name: a save of it reaches no graph.
        try daemon.insertDirectly(
            Self.teams + 1, with: #"INSERT INTO "e_Team" (id, _version, "teamName") VALUES (?, 1, ?)"#
        ) {
            statement, index in
            sqlite3_bind_int64(statement, 1, Int64(index))
            sqlite3_bind_text(statement, 2, "team \(index)", -1, Self.transient)
        }
        try daemon.insertDirectly(
            matches, with: #"INSERT INTO "e_Match" (id, _version, "score", "homeTeam") VALUES (?, 1, ?, ?)"#
        ) { statement, index in
            sqlite3_bind_int64(statement, 1, Int64(index))
            sqlite3_bind_int64(statement, 2, Int64(index))
            sqlite3_bind_int64(statement, 3, Int64(index <= Self.shown ? 1 : 2 + index % (Self.teams - 1)))
        }

        // Subscribe with prefetch vs without plus a fetch of the Teams (each on a fresh session:
        // a set shared with an earlier subscription would answer from memory).
        let all = #""entity":"Match","sort":[{"key":"score"}]"#
        var prefetching: [Double] = []
        var plain: [Double] = []
        for round in 0..<(quick ? 1 : 3) {
            // A distinct predicate per round: every subscribe builds its set.
            let request = #"\#(all),"predicate":"score > \#(-round - 1)""#
            plain.append(
                try Self.milliseconds {
                    let client = try RawRPCClient(endpoint: daemon.endpoint)
                    try client.initialize(name: "plain \(round)")
                    _ = try client.call("results/subscribe", params: #"{"request":{\#(request)},"include":"none"}"#)
                    _ = try client.call("store/fetch", params: #"{"entity":"Team"}"#)
                })
            prefetching.append(
                try Self.milliseconds {
                    let client = try RawRPCClient(endpoint: daemon.endpoint)
                    try client.initialize(name: "prefetching \(round)")
                    _ = try client.call(
                        "results/subscribe",
                        params: #"{"request":{\#(request),"prefetch":["homeTeam"]},"include":"none"}"#)
                })
        }
        suite.check(
            "prefetch.subscribe-ratio", percentile(prefetching, 0.5) / percentile(plain, 0.5), target: 1.5, .atMost,
            of: "prefetching subscribe ms", over: "plain subscribe + Team fetch ms")

        // The unreached save, alone and with 100 prefetching subscriptions of Team 1's Matches.
        let unreached = "Team/\(Self.teams + 1)"
        let saves = quick ? 100 : 400
        let alone = try SessionLoad.saveP50(saves, writer: writer) {
            #"{"updated":[{"id":"\#(unreached)","values":{"teamName":"lonely \#($0)"}}]}"#
        }
        let context = zmq_ctx_new()
        defer { zmq_ctx_term(context) }
        let watchers = try SessionLoad.open(
            sessions, connect: { try RawRPCClient(endpoint: daemon.endpoint, sharedContext: $1) },
            name: { "watcher \($0)" }, context: context
        ) { client, index in
            // Distinct sets (score > -index - 1 holds the same rows), each showing Team 1's 1,000 Matches.
            _ = try client.call(
                "results/subscribe",
                params:
                    #"{"request":{"entity":"Match","predicate":"score <= \#(Self.shown) AND score > \#(-index - 1)","sort":[{"key":"score"}],"prefetch":["homeTeam"]},"include":"none"}"#
            )
        }
        let live = try SessionLoad.saveP50(saves, writer: writer) {
            #"{"updated":[{"id":"\#(unreached)","values":{"teamName":"still lonely \#($0)"}}]}"#
        }
        suite.check(
            "prefetch.unreached-save-ratio", live / alone, target: 1.3, .atMost,
            of: "save p50 with \(sessions) prefetching sets", over: "none")

        // Renames of Team 1: the last of the 100 notifications, after the save.
        var lasts: [Double] = []
        var answered: [Double] = []
        var firsts: [Double] = []
        let renames = quick ? 10 : 50
        let cpuBefore = CPUTime.process(daemon.pid)
        for rename in 0..<renames {
            let start = ContinuousClock.now
            let done = DispatchGroup()
            let arrivals = Arrivals(watchers)
            for index in watchers.indices {
                done.enter()
                Thread.detachNewThread {
                    arrivals.wait(index)
                    done.leave()
                }
            }
            let sent = ContinuousClock.now
            _ = try writer.call(
                "store/save", params: #"{"updated":[{"id":"Team/1","values":{"teamName":"renamed \#(rename)"}}]}"#)
            answered.append((ContinuousClock.now - sent).milliseconds)
            done.wait()
            firsts.append((arrivals.earliest - sent).milliseconds)
            try arrivals.check()
            lasts.append((arrivals.latest - start).milliseconds)
        }
        // The daemon's CPU per rename tells its own cost from waiting (a busy machine, the clients).
        var cpuPerRename: Double?
        if let before = cpuBefore, let after = CPUTime.process(daemon.pid) {
            cpuPerRename = (after - before) * 1_000 / Double(renames)
        }
        suite.check(
            "prefetch.rename-last-p50-ms", percentile(lasts, 0.5), target: 3, .atMost,
            of: "rename → last of \(sessions) didChange, ms")
        suite.check(
            "prefetch.rename-last-p99-ms", percentile(lasts, 0.99), target: 10, .atMost,
            of: "rename → last of \(sessions) didChange, ms")
        suite.note(
            "prefetch",
            [
                "matches": .int(Int64(matches)), "subscribePrefetchMs": .double(percentile(prefetching, 0.5)),
                "subscribePlainPlusFetchMs": .double(percentile(plain, 0.5)), "saveAloneUs": .double(alone),
                "saveLiveUs": .double(live), "renameSaveAnsweredP50Ms": .double(percentile(answered, 0.5)),
                "renameFirstDidChangeP50Ms": .double(percentile(firsts, 0.5)),
                "renameDaemonCPUMs": cpuPerRename.map { .double($0) } ?? .null,
                "daemonRSSBytes": .int(daemon.memory()?.residentBytes ?? 0),
            ])
        withExtendedLifetime(watchers) {}
    }

    /// `SQLITE_TRANSIENT`: SQLite copies the bound text.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// The milliseconds `body` took.
    private static func milliseconds(_ body: () throws -> Void) throws -> Double {
        let start = ContinuousClock.now
        try body()
        return (ContinuousClock.now - start).milliseconds
    }
}

/// When each watcher's `results/didChange` arrived, and whether it carried the renamed rows.
/// Each watcher is read by one thread at a time (its own, during one rename).
private final class Arrivals: @unchecked Sendable {
    private let watchers: [RawRPCClient]
    private let lock = NSLock()
    private var times: [ContinuousClock.Instant?]
    private var problems: [String] = []

    init(_ watchers: [RawRPCClient]) {
        self.watchers = watchers
        times = Array(repeating: nil, count: watchers.count)
    }

    /// Reads watcher `index`'s messages until its `results/didChange`, and records when it came.
    func wait(_ index: Int) {
        let watcher = watchers[index]
        do {
            while true {
                let bytes = try watcher.dealer.receive()
                let now = ContinuousClock.now
                let message = try JSONParser.parse(bytes)
                guard message["method"] == "results/didChange" else { continue }
                let updates = message["params"]?["objects"]?.arrayValue?.count ?? 0
                lock.withLock {
                    times[index] = now
                    if updates != PrefetchBenchmark.shown {
                        problems.append("watcher \(index): \(updates) updates, not \(PrefetchBenchmark.shown)")
                    }
                }
                return
            }
        } catch {
            lock.withLock { problems.append("watcher \(index): \(error)") }
        }
    }

    /// The first arrival.
    var earliest: ContinuousClock.Instant { lock.withLock { times.compactMap { $0 }.min() ?? .now } }

    /// The last arrival.
    var latest: ContinuousClock.Instant { lock.withLock { times.compactMap { $0 }.max() ?? .now } }

    /// Throws when a watcher got no notification or the wrong one.
    func check() throws {
        let problems = lock.withLock { self.problems }
        guard problems.isEmpty else { throw BenchmarkError(problems.prefix(3).joined(separator: "; ")) }
    }
}
