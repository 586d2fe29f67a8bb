import CZeroMQ
import DepotProtocol
import Foundation
import ZeroMQ

/// What row-level scopes cost (issue 25), against baselines in the same run:
///
/// - 1,000 sessions, each with its own key scoped `owner == $keyName`, all
///   subscribed with the same request: a save by one owner, p50, against the same
///   save with no subscriptions (target ≤ 2×); and how many result sets were
///   notified (target: only that owner's one);
/// - a scoped fetch of one owner's rows out of 1M (owner indexed) against an
///   unscoped fetch with the owner condition written by hand (target ≥ 0.9×);
/// - the same save with 200 sessions, each with an owner-scoped key and one
///   scoped `store/observe` of Item (nothing subscribed), against none
///   (target ≤ 1.5×, issue 34: observers live in the publish lane, filed by
///   owner, checked on the commit's row images without a snapshot);
/// - the same save once every one of those sessions also has a `store/observe`
///   of Item under its scope, against no subscriptions (info: each scoped
///   observer checks the saved row against its rule, one read per owner).
struct ScopeCostBenchmark: Benchmark {
    static let name = "scope-cost"
    static let summary =
        "1,000 owner-scoped sessions: save p50 vs none (≤ 2×), sets notified (1); 200 scoped observers: save p50 vs none (≤ 1.5×); scoped fetch over 1M rows vs hand-written owner predicate (≥ 0.9×)"

    static let model = """
        {"entities":[{"name":"Item","attributes":[
          {"name":"owner","type":"string","indexed":true},{"name":"score","type":"integer"}]}]}
        """

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let owners = quick ? 200 : 1_000
        let rows = quick ? 100_000 : 1_000_000
        let saves = quick ? 100 : 400
        ProcessLimits.raiseDescriptorLimit()

        let keys = try OwnerScopedKeys(owners: owners, directory: suite.directory.appendingPathComponent("keys"))
        let members = keys.members
        let daemon = try DaemonProcess(
            executable: suite.options.depotd, dataDirectory: suite.directory.appendingPathComponent("depotd-scoped"),
            transport: .tcp,
            extraArguments: suite.options.daemonArguments + keys.daemonArguments + ["--max-sessions", "5000"])
        defer { daemon.stop() }
        func client(_ pair: CurveKeyPair, context: UnsafeMutableRawPointer? = nil) throws -> RawRPCClient {
            try RawRPCClient(endpoint: daemon.endpoint, curve: keys.client(pair), sharedContext: context)
        }
        let setup = try client(keys.admin)
        try setup.initialize()
        _ = try setup.call("model/define", params: Self.model)
        for start in stride(from: 0, to: rows, by: 50_000) {
            let seed = (start..<min(rows, start + 50_000)).map { #"{"owner":"u\#($0 % owners)","score":\#($0)}"# }
            _ = try setup.call(
                "store/batchInsert", params: #"{"entity":"Item","objects":[\#(seed.joined(separator: ","))]}"#)
        }

        // A scoped fetch of u0's rows vs the same rows asked for by hand, unscoped.
        let owner = try client(members[0])
        try owner.initialize(name: "u0")
        let measured = try await suite.sampler.measure([
            BenchmarkCase("scope.fetch.hand-written", unit: "fetch", daemon: daemon.pid) { iteration in
                try setup.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 1_000, method: "store/fetch",
                        params: #"{"entity":"Item","predicate":"owner == 'u0'","resultType":"ids"}"#))
            },
            BenchmarkCase("scope.fetch.scoped", unit: "fetch", daemon: daemon.pid) { iteration in
                try owner.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 1_000, method: "store/fetch",
                        params: #"{"entity":"Item","resultType":"ids"}"#))
            },
        ])
        suite.record(measured)
        suite.compare("scope.fetch-\(rows)-rows", measured[1], to: measured[0], target: 0.9)

        // u0's saves, alone and with every owner subscribed under its scope.
        func p50() throws -> Double {
            try SessionLoad.saveP50(saves, writer: owner) { index in
                #"{"updated":[{"id":"Item/1","values":{"score":\#(index)}}]}"#
            }
        }
        let alone = try p50()
        let context = zmq_ctx_new()
        defer { zmq_ctx_term(context) }
        // 200 sessions observing (scoped), nothing subscribed; they disconnect before the next case.
        let observing = min(200, owners)
        let observers = try SessionLoad.open(
            observing, connect: { try client(members[$0], context: $1) }, name: { "observer-u\($0)" },
            context: context
        ) { observer, _ in
            _ = try observer.call("store/observe", params: #"{"entities":["Item"]}"#)
        }
        let withObservers = try p50()
        suite.check(
            "scope.\(observing)-observers.p50-ratio", withObservers / alone, target: 1.5, .atMost,
            of: "save p50 with \(observing) owner-scoped observers (store/observe)", over: "none")
        for observer in observers { _ = try observer.call("disconnect") }
        let subscribers = try SessionLoad.open(
            members.count, connect: { try client(members[$0], context: $1) }, name: { "u\($0)" }, context: context
        ) { subscriber, _ in
            _ = try subscriber.call(
                "results/subscribe",
                params: #"{"request":{"entity":"Item","sort":[{"key":"score"}]},"include":"none"}"#)
        }
        let live = try p50()
        suite.check(
            "scope.\(owners)-owners.p50-ratio", live / alone, target: 2.0, .atMost,
            of: "save p50 with \(owners) owner-scoped subscriptions", over: "none")
        // Only u0's set heard of u0's saves.
        let sets = try setup.call("server/stats")["subscriptions"]?.arrayValue ?? []
        let notified = sets.filter { ($0["notificationsSent"]?.intValue ?? 0) > 0 }.count
        suite.check(
            "scope.\(owners)-owners.sets-notified", Double(notified), target: 1, .atMost,
            of: "result sets notified of one owner's saves", over: "")
        // And every owner observing under its scope as well.
        for subscriber in subscribers {
            _ = try subscriber.call("store/observe", params: #"{"entities":["Item"]}"#)
        }
        let observed = try p50()
        suite.check(
            "scope.\(owners)-owners.observed.p50-ratio", observed / alone, target: nil, .atMost,
            of: "save p50 with \(owners) owner-scoped subscriptions and observers", over: "none")
        suite.note(
            "\(owners)-owners",
            [
                "none-p50-us": .double(alone), "live-p50-us": .double(live), "observed-p50-us": .double(observed),
                "\(observing)-observers-p50-us": .double(withObservers),
                "sets": .int(Int64(sets.count)),
            ])
        withExtendedLifetime(subscribers) {}
    }
}
