import DepotClient
import DepotPostgres
import DepotProtocol
import Foundation
import Logging
import PostgresNIO

/// Issue 26: the log and PostgreSQL stay the same size under a steady write load when
/// `--log-retention` is set. One daemon on a throwaway PostgreSQL (fsync on) with
/// `--log-retention 1000 --log-grace 5s` takes one-object updates of 1,000 Items from 4 writers
/// for 10 minutes (60 s with `--quick`; `DEPOT_BENCH_LOG_SIZE_SECONDS` sets another length), while
/// a sampler reads every 5 s (2 s with `--quick`) the log's `count(*)`, its
/// `pg_total_relation_size` (table, TOAST and index) and that of every table in the schema.
///
/// Flat, as the JSON checks it: after a warm-up (the first third of the run, which the retention
/// and the first prunes need), the least-squares line through the samples grows by at most 25 %
/// of their mean over the rest of the run (`growth = slope × span / mean`). The log keeps up to
/// the retention plus what one prune interval (10 s) adds, so its count saws between the two; a
/// log that is never pruned grows by 100 % or more over that span (every save adds a row).
struct ClusterLogSizeBenchmark: Benchmark {
    static let name = "cluster-log-size"
    static let summary =
        "log rows and PostgreSQL size under 10 min of writes with --log-retention (60 s --quick): flat after the warm-up (growth over the steady span ≤ 25 % of the mean)"

    /// One sample of the sizes.
    struct Sample: Codable {
        var seconds: Double
        var logRows: Int64
        var logBytes: Int64
        var schemaBytes: Int64
        var saves: Int
    }

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let seconds =
            ProcessInfo.processInfo.environment["DEPOT_BENCH_LOG_SIZE_SECONDS"].flatMap(Double.init)
            ?? (quick ? 60 : 600)
        let interval: Duration = quick ? .seconds(2) : .seconds(5)
        let objects = 1_000
        let retention = 1_000
        let server = try ThrowawayPostgres(directory: suite.directory.appendingPathComponent("postgres"))
        defer { server.stop() }
        let store = "postgresql://\(server.url.username)@\(server.url.host):\(server.url.port)/\(server.url.database)"
        let schema = "bench_log"
        let daemon = try suite.startDaemon(
            .tcp, label: "depotd-log",
            extraArguments: [
                "--store", store + "?schema=\(schema)", "--log-retention", String(retention), "--log-grace", "5s",
            ])
        defer { daemon.stop() }
        let setup = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        _ = try await setup.call(ModelDefine.self, .init(entities: [ItemSeed.entity]))
        try await ItemSeed.save(objects, through: setup)
        setup.abort()

        let logger = Logger(label: "depot.bench.log-size")
        let admin = try await PostgresConnection.connect(configuration: server.url.configuration, id: 4, logger: logger)
        defer { Task { try? await admin.close() } }
        let saves = SaveCounter()
        let start = ContinuousClock.now
        let deadline = start + .milliseconds(Int64(seconds * 1000))
        var samples: [Sample] = []
        let endpoint = daemon.endpoint
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    let connection = try await DepotConnection.connect(to: endpoint, timeout: .seconds(600))
                    defer { connection.abort() }
                    var random = SystemRandomNumberGenerator()
                    var count = 0
                    while ContinuousClock.now < deadline {
                        let row = Int.random(in: 1...objects, using: &random)
                        count += 1
                        let moved = ItemSeed.createdAt(row) + Double(writer * 1_000_000 + count)
                        _ = try await connection.call(
                            StoreSave.self,
                            .init(updated: [
                                UpdatedObject(
                                    id: "Item/\(row)",
                                    values: ["createdAt": .string(ISO8601Text.string(seconds: moved))])
                            ]))
                        await saves.add()
                    }
                }
            }
            while ContinuousClock.now < deadline {
                samples.append(
                    try await Self.sample(
                        admin, schema: schema, at: (ContinuousClock.now - start).seconds, saves: await saves.count,
                        logger: logger))
                try await Task.sleep(for: interval)
            }
            try await group.waitForAll()
        }
        samples.append(
            try await Self.sample(
                admin, schema: schema, at: (ContinuousClock.now - start).seconds, saves: await saves.count,
                logger: logger))

        let steady = samples.filter { $0.seconds >= seconds / 3 }
        func summary(_ name: String, _ value: (Sample) -> Double) -> JSONValue {
            let values = samples.map(value)
            let growth = Self.growth(steady.map { ($0.seconds, value($0)) })
            suite.check(
                "cluster.log-size.\(name)-growth", growth, target: 0.25, .atMost,
                of: "fitted growth over the steady span / mean")
            return [
                "first": .double(values.first ?? 0), "last": .double(values.last ?? 0),
                "max": .double(values.max() ?? 0), "steadyMean": .double(Self.mean(steady.map(value))),
                "steadySlopePerMinute": .double(Self.slope(steady.map { ($0.seconds, value($0)) }) * 60),
                "steadyGrowth": .double(growth),
            ]
        }
        suite.note(
            "logSize",
            [
                "seconds": .double(seconds), "retention": .int(Int64(retention)), "grace": .string("5s"),
                "objects": .int(Int64(objects)), "saves": .int(Int64(samples.last?.saves ?? 0)),
                "savesPerSecond": .double(Double(samples.last?.saves ?? 0) / seconds),
                "logRows": summary("log-rows") { Double($0.logRows) },
                "logBytes": summary("log-bytes") { Double($0.logBytes) },
                "schemaBytes": summary("schema-bytes") { Double($0.schemaBytes) },
                "samples": .array(
                    samples.map { sample in
                        [
                            "seconds": .double(sample.seconds), "logRows": .int(sample.logRows),
                            "logBytes": .int(sample.logBytes), "schemaBytes": .int(sample.schemaBytes),
                            "saves": .int(Int64(sample.saves)),
                        ]
                    }),
            ])
    }

    /// The log's rows and size and the schema's size, now.
    private static func sample(
        _ connection: PostgresConnection, schema: String, at seconds: Double, saves: Int, logger: Logger
    ) async throws -> Sample {
        let log = "\"\(schema)\".change_log"
        let row = try await connection.query(
            """
            SELECT (SELECT count(*) FROM \(unescaped: log)), pg_total_relation_size(\(log)::regclass),
                (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
                    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = \(schema) AND c.relkind = 'r')
            """, logger: logger
        ).collect().first
        guard let (rows, logBytes, schemaBytes) = try row?.decode((Int64, Int64, Int64).self) else {
            throw BenchmarkError("no sizes from PostgreSQL")
        }
        return Sample(seconds: seconds, logRows: rows, logBytes: logBytes, schemaBytes: schemaBytes, saves: saves)
    }

    /// The least-squares slope of `points` (per second).
    static func slope(_ points: [(Double, Double)]) -> Double {
        guard points.count > 1 else { return 0 }
        let meanX = mean(points.map(\.0))
        let meanY = mean(points.map(\.1))
        let covariance = points.reduce(0) { $0 + ($1.0 - meanX) * ($1.1 - meanY) }
        let variance = points.reduce(0) { $0 + ($1.0 - meanX) * ($1.0 - meanX) }
        return variance > 0 ? covariance / variance : 0
    }

    /// How much the fitted line through `points` rises over their span, relative to their mean.
    static func growth(_ points: [(Double, Double)]) -> Double {
        guard let first = points.first?.0, let last = points.last?.0 else { return 0 }
        let level = mean(points.map(\.1))
        return level > 0 ? slope(points) * (last - first) / level : 0
    }

    static func mean(_ values: [Double]) -> Double { values.isEmpty ? 0 : values.reduce(0, +) / Double(values.count) }
}

/// The saves the writers made so far.
private actor SaveCounter {
    private(set) var count = 0

    func add() { count += 1 }
}
