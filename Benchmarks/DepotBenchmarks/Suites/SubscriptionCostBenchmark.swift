import CZeroMQ
import DepotProtocol
import Foundation

/// What live subscriptions cost a save that they do not (or barely) concern:
/// the round trip of a one-object `store/save` with many subscriptions live,
/// against the same save with none, in the same run (issue 12's rows):
///
/// - 100 subscriptions with distinct predicates, none matching the saved row (target ≤ 1.5×);
/// - 1,000 sessions each holding one distinct `score == k` subscription, none matching (≤ 2×);
/// - 10,000 distinct equality subscriptions, one of which matches the saved row (≤ 2×);
/// - one subscription over a 1M-row table, which holds the saved row (≤ 1.2×).
struct SubscriptionCostBenchmark: Benchmark {
    static let name = "subscription-cost"
    static let summary =
        "save p50 with 100 / 1,000-session / 10,000 live subscriptions / one over 1M rows vs none (≤ 1.5×, 2×, 2×, 1.2×)"

    static let model = """
        {"entities":[{"name":"Item","attributes":[
          {"name":"name","type":"string"},{"name":"score","type":"integer","indexed":true}]}]}
        """

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let saves = quick ? 100 : 400
        ProcessLimits.raiseDescriptorLimit()

        for (label, sessions, perSession, matching, target) in [
            ("100-subscriptions", 1, 100, false, 1.5), ("1000-sessions", quick ? 200 : 1_000, 1, false, 2.0),
            ("10000-subscriptions", 10, quick ? 200 : 1_000, true, 2.0), ("1M-rows", 1, 1, true, 1.2),
        ] {
            let rows = label == "1M-rows" ? (quick ? 50_000 : 1_000_000) : 1_000
            let daemon = try DaemonProcess(
                executable: suite.options.depotd, dataDirectory: suite.directory.appendingPathComponent(label),
                transport: .ipc, extraArguments: suite.options.daemonArguments + ["--max-sessions", "5000"])
            defer { daemon.stop() }
            let writer = try RawRPCClient(endpoint: daemon.endpoint)
            try writer.initialize()
            _ = try writer.call("model/define", params: Self.model)
            for start in stride(from: 0, to: rows, by: 50_000) {
                let seed = (start..<min(rows, start + 50_000)).map {
                    #"{"name":"item \#($0)","score":\#($0 + 1_000_000)}"#
                }
                _ = try writer.call(
                    "store/batchInsert", params: #"{"entity":"Item","objects":[\#(seed.joined(separator: ","))]}"#)
            }

            func p50() throws -> Double {
                // Item/1 moves between two scores: with `matching`, the second is one subscription's.
                try SessionLoad.saveP50(saves, writer: writer) { index in
                    let score = matching && index % 2 == 1 ? 7 : 1_000_000 + index % 2
                    return #"{"updated":[{"id":"Item/1","values":{"score":\#(score)}}]}"#
                }
            }
            let alone = try p50()

            let context = zmq_ctx_new()
            defer { zmq_ctx_term(context) }
            let clients = try SessionLoad.open(
                sessions, connect: { try RawRPCClient(endpoint: daemon.endpoint, sharedContext: $1) },
                name: { "subscriber \($0)" }, context: context
            ) { client, session in
                for number in 0..<perSession {
                    let k = session * perSession + number
                    let predicate =
                        switch label {
                        case "100-subscriptions": #""predicate":"name CONTAINS 'zz\#(k)'","#
                        case "1M-rows": ""
                        default: #""predicate":"score == \#(k)","#
                        }
                    _ = try client.call(
                        "results/subscribe",
                        params: #"{"request":{"entity":"Item",\#(predicate)"sort":[{"key":"score"}]},"include":"none"}"#
                    )
                }
            }
            let live = try p50()
            suite.check(
                "subscriptions.\(label).p50-ratio", live / alone, target: target, .atMost,
                of: "save p50 with \(sessions * perSession) live", over: "none")
            suite.note("\(label).p50-us", ["none": .double(alone), "live": .double(live)])
            withExtendedLifetime(clients) {}
        }
    }
}
