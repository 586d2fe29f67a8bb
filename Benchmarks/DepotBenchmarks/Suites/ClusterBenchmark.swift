import DepotClient
import DepotPostgres
import DepotProtocol
import Foundation
import Logging
import PostgresNIO

/// Issue 13's benchmark: two `depotd` on one throwaway PostgreSQL (fsync on), each a replica of the
/// cluster's log (docs/cluster.md).
///
/// Measures, in one run: a single-object `store/save` through daemon A against a raw postgres-nio
/// single-row insert transaction on the same server; and the latency from a save on A to the
/// `results/didChange` of a subscription over N rows on daemon B, beside the same figure for a
/// subscription on A itself.
struct ClusterBenchmark: Benchmark {
    static let name = "cluster"
    static let summary =
        "PostgreSQL-backed save vs raw postgres-nio insert transaction (≥ 0.5×); save on A → didChange on B p50 ≤ 2 ms, p99 ≤ 10 ms"

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
                    .init(inserted: [
                        InsertedObject(
                            entity: "Item",
                            values: [
                                "name": .string("saved \(index)"),
                                "createdAt": .string(ISO8601Text.string(seconds: ItemSeed.createdAt(index))),
                            ])
                    ]))
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

        let rows = quick ? 20_000 : 1_000_000
        let samples = quick ? 50 : 300
        let loadStart = ContinuousClock.now
        let chunk = 20_000
        var loaded = 0
        while loaded < rows {
            let count = min(chunk, rows - loaded)
            let objects = (loaded..<loaded + count).map { index in
                InsertedObject(
                    entity: "Item",
                    values: [
                        "name": .string("item \(index)"),
                        "createdAt": .string(ISO8601Text.string(seconds: ItemSeed.createdAt(index))),
                    ])
            }
            _ = try await writer.call(StoreSave.self, .init(inserted: objects), timeout: .seconds(600))
            loaded += count
        }
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
        suite.check("cluster.didChange-other-daemon-p50-ms", report.otherDaemonP50Ms, target: 2, .atMost, of: "ms")
        suite.check("cluster.didChange-other-daemon-p99-ms", report.otherDaemonP99Ms, target: 10, .atMost, of: "ms")
        suite.check("cluster.didChange-same-daemon-p50-ms", report.sameDaemonP50Ms, target: nil, .atMost, of: "ms")
        suite.check("cluster.didChange-same-daemon-p99-ms", report.sameDaemonP99Ms, target: nil, .atMost, of: "ms")
    }
}
