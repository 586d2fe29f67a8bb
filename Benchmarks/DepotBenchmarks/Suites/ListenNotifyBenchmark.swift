import DepotClient
import DepotProtocol
import Foundation
import GRDBSQLite
import Logging
import PostgresNIO

/// Issue 34's "what users build instead": live results the way users build them on PostgreSQL,
/// against Depot's, in one run on one machine, measured from outside.
///
/// Both sides hold the same 1M-row table (`id`, `name`, `score`, `bucket`; `score` and `bucket`
/// indexed, as Depot indexes them) and follow two result shapes: a top-50 window (`ORDER BY score
/// LIMIT 50`) and a 1% equality filter (`bucket = 7` of 100 buckets, by score). The PostgreSQL
/// side is a row trigger (`AFTER INSERT OR UPDATE OR DELETE`) calling `pg_notify`, and a
/// ``RefetchingListener`` that refetches the query (`id, score`) on each notification and diffs it
/// against what it held. Depot's side is a release `depotd` (SQLite) and `results/subscribe`.
///
/// The same writes go to both, one row per write, each changing the results (a row enters, moves
/// within, then leaves): spaced as user traffic (one every 20 ms) and back to back (the next as
/// soon as the previous save returns). Save → delta known is from the writer's clock before its
/// save to the moment the listener has diffed a refetch that includes it, or the subscriber has
/// the `results/didChange` of its transaction. Targets: Depot's p50 ≤ 0.5× PostgreSQL's on the
/// window and ≤ 0.1× on the filter, both paces; Depot's own save p50 ≤ 1.5× a single-row
/// `UPDATE` (autocommit).
struct ListenNotifyBenchmark: Benchmark {
    static let name = "pg-notify"
    static let summary =
        "what users build instead: save → delta p50 vs PostgreSQL trigger + pg_notify + refetch-and-diff, top-50 window (≤ 0.5×) and 1% filter (≤ 0.1×) over 1M rows, spaced and back to back; save p50 vs a single-row UPDATE (≤ 1.5×)"

    /// A result shape both sides follow.
    enum Shape: String, CaseIterable, Sendable {
        /// The 50 lowest scores.
        case window
        /// `bucket = 7` (1% of the rows), by score.
        case filter

        /// Depot's p50 over PostgreSQL's, at most.
        var target: Double { self == .window ? 0.5 : 0.1 }

        /// The request Depot keeps live.
        var request: FetchRequest {
            switch self {
            case .window:
                FetchRequest(entity: "Ranked", sort: [SortDescriptor(key: "score")], limit: 50)
            case .filter:
                FetchRequest(
                    entity: "Ranked", predicate: "bucket == \(ListenNotifyBenchmark.filterBucket)",
                    sort: [SortDescriptor(key: "score")])
            }
        }

        /// What the listener refetches: `id, score` in order.
        var sql: String {
            switch self {
            case .window: "SELECT id, score FROM ranked ORDER BY score LIMIT 50"
            case .filter:
                "SELECT id, score FROM ranked WHERE bucket = \(ListenNotifyBenchmark.filterBucket) ORDER BY score"
            }
        }
    }

    /// How the writes are spaced.
    enum Pace: String, CaseIterable, Sendable {
        /// One write every 20 ms, as user traffic.
        case spaced
        /// The next write as soon as the previous save returns.
        case backToBack = "back-to-back"
    }

    /// One write: a row's new score, bucket, or both.
    struct Write: Sendable {
        var id: Int
        var score: Int?
        var bucket: Int?
    }

    /// One phase's figures, milliseconds.
    struct Phase: Codable {
        var side: String
        var shape: String
        var pace: String
        var writes: Int
        var deltaP50Ms: Double
        var deltaP99Ms: Double
        var saveP50Ms: Double
        var saveP99Ms: Double
        /// From the save's return to the delta known, per write: what following costs after the write itself.
        var afterSaveP50Ms: Double
        var serverCPUMicrosPerWrite: Double?
        var clientCPUMicrosPerWrite: Double
        /// PostgreSQL: how many refetches ran and what their diffs found, summed.
        var refetches: Int?
        var diffed: String?
        /// Depot: how long `results/subscribe` took.
        var subscribeMs: Double?
    }

    /// The bucket the filter keeps.
    static let filterBucket = 7
    /// How many buckets there are.
    static let buckets = 100
    /// The window's size.
    static let windowSize = 50
    /// The time between spaced writes.
    static let spacing = Duration.milliseconds(20)

    /// Row `id`'s seeded score: a permutation of the ids (7919 is prime, so coprime to the row
    /// count), times 1000, so that moved scores (not multiples of 1000) never tie.
    static func score(of id: Int, rows: Int) -> Int { ((id * 7919) % rows + 1) * 1000 }
    /// Row `id`'s seeded bucket.
    static func bucket(of id: Int) -> Int { id % buckets }

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let rows = quick ? 50_000 : 1_000_000
        let count = quick ? 60 : 300
        let logger = Logger(label: "depot.bench.pg-notify")

        let server = try ThrowawayPostgres(directory: suite.directory.appendingPathComponent("postgres"))
        defer { server.stop() }
        let configuration = server.url.configuration
        let pgWriter = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        let daemon = try suite.startDaemon(.tcp)
        defer { daemon.stop() }
        let writer = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))
        let watcher = try await DepotConnection.connect(to: daemon.endpoint, timeout: .seconds(600))

        let loadStart = ContinuousClock.now
        try await Self.seedPostgres(rows, pgWriter, logger: logger)
        let postgresLoad = (ContinuousClock.now - loadStart).seconds
        try await Self.seedDepot(rows, daemon: daemon, writer: writer)
        let depotLoad = (ContinuousClock.now - loadStart).seconds - postgresLoad
        suite.note(
            "setup",
            [
                "rows": .int(Int64(rows)), "postgresLoadSeconds": .double(postgresLoad),
                "depotLoadSeconds": .double(depotLoad), "postgresFsync": "on",
                "depotStore": "SQLite (WAL, synchronous = NORMAL)",
            ])

        // PostgreSQL's writers: as installed (each commit waits for its WAL flush; fsync is on),
        // and with `synchronous_commit = off`, the durability of SQLite's WAL with `synchronous =
        // NORMAL` (a crash of the machine may lose the last commits).
        let unflushed = try await PostgresConnection.connect(configuration: configuration, id: 2, logger: logger)
        _ = try await unflushed.query("SET synchronous_commit = off", logger: logger)
        let postgresWriters: [(side: String, connection: PostgresConnection)] = [
            ("postgres", pgWriter), ("postgres-unflushed", unflushed),
        ]

        try await bareSaves(
            suite, rows: rows, daemon: daemon, writer: writer, postgres: postgresWriters, logger: logger)
        try await Self.createTrigger(pgWriter, logger: logger)

        var generator = SystemRandomNumberGenerator()
        var phases: [Phase] = []
        var liveSaves: [String: [Double]] = [:]
        for shape in Shape.allCases {
            for pace in Pace.allCases {
                let writes = Self.writes(shape, count: count, rows: rows, using: &generator)
                var baselines: [(side: String, phase: Phase)] = []
                for (side, connection) in postgresWriters {
                    let postgres = try await postgresPhase(
                        side, shape, pace, writes, server: server, writer: connection, logger: logger)
                    baselines.append((side, postgres.phase))
                    phases.append(postgres.phase)
                    suite.record([postgres.measurement])
                    if pace == .spaced { liveSaves[side, default: []] += postgres.saves }
                }
                let depot = try await depotPhase(shape, pace, writes, daemon: daemon, writer: writer, watcher: watcher)
                phases.append(depot.phase)
                suite.record([depot.measurement])
                if pace == .spaced { liveSaves["depot", default: []] += depot.saves }
                for (side, baseline) in baselines {
                    let label =
                        "pg-notify.\(shape.rawValue).\(pace.rawValue)" + (side == "postgres" ? "" : "-unflushed")
                    suite.check(
                        "\(label).p50", depot.phase.deltaP50Ms / baseline.deltaP50Ms, target: shape.target,
                        .atMost, of: "Depot save → didChange p50", over: "\(side) save → diff p50")
                    suite.check(
                        "\(label).p99", depot.phase.deltaP99Ms / baseline.deltaP99Ms, target: nil, .atMost,
                        of: "Depot save → didChange p99", over: "\(side) save → diff p99")
                }
            }
        }
        // The writers' own saves while everything is live: the spaced phases, where each save
        // starts after the previous delta settled.
        let depotLive = percentile(liveSaves["depot"] ?? [], 0.5)
        var livePostgres: [String: JSONValue] = ["depot": .double(depotLive)]
        for (side, _) in postgresWriters {
            let postgresLive = percentile(liveSaves[side] ?? [], 0.5)
            livePostgres[side] = .double(postgresLive)
            suite.check(
                "pg-notify.save-live\(side == "postgres" ? "" : "-unflushed").p50-ratio", depotLive / postgresLive,
                target: 1.5, .atMost, of: "Depot store/save p50 (subscription live, spaced phases)",
                over: "\(side) UPDATE p50 (trigger and listener live)")
        }
        suite.note("save-live-p50-ms", .object(livePostgres))
        suite.noteReport(phases)
        try? await pgWriter.close()
        try? await unflushed.close()
        writer.abort()
        watcher.abort()
    }

    /// The writers' own save round trips before anything follows the table: `store/save` of one
    /// row's score against a single-row `UPDATE` (autocommit) on each of `postgres`' connections,
    /// interleaved by the sampler.
    private func bareSaves(
        _ suite: SuiteRun, rows: Int, daemon: DaemonProcess, writer: DepotConnection,
        postgres: [(side: String, connection: PostgresConnection)], logger: Logger
    ) async throws {
        // A row in neither result: outside the window and the bucket.
        let id = (1...rows).first {
            Self.bucket(of: $0) != Self.filterBucket && Self.score(of: $0, rows: rows) > 10_000_000
        }!
        let seeded = Self.score(of: id, rows: rows)
        let depot = BenchmarkCase("pg-notify.save.depot", unit: "save", daemon: daemon.pid) { index in
            _ = try await writer.call(
                StoreSave.self,
                .init(updated: [UpdatedObject(id: "Ranked/\(id)", values: ["score": .int(Int64(seeded + index % 2))])]))
        }
        let updates = postgres.map { writer in
            BenchmarkCase("pg-notify.save.\(writer.side)-update", unit: "UPDATE") { index in
                _ = try await writer.connection.query(
                    "UPDATE ranked SET score = \(seeded + index % 2) WHERE id = \(id)", logger: logger)
            }
        }
        let perf = PerfRecorder(pid: daemon.pid, label: "pg-notify.save.depot")
        let measured = try await suite.sampler.measure([depot] + updates)
        perf.stop()
        suite.record(measured)
        for (index, (side, _)) in postgres.enumerated() {
            suite.check(
                "pg-notify.save-bare\(side == "postgres" ? "" : "-unflushed").p50-ratio",
                measured[0].p50 / measured[index + 1].p50, target: 1.5, .atMost,
                of: "Depot store/save p50 (nothing live)", over: "\(side) UPDATE p50 (no trigger)")
        }
    }

    // MARK: - The two sides

    private func postgresPhase(
        _ side: String, _ shape: Shape, _ pace: Pace, _ writes: [Write], server: ThrowawayPostgres,
        writer: PostgresConnection,
        logger: Logger
    ) async throws -> (phase: Phase, measurement: Measurement, saves: [Double]) {
        let listener = try await RefetchingListener(
            configuration: server.url.configuration, channel: Self.channel, sql: shape.sql, logger: logger)
        let serverCPU = server.cpuSeconds()
        let clientCPU = CPUTime.current()
        let driven = try await Self.drive(writes, pace) { write, index in
            _ = try await writer.query(Self.update(write), logger: logger)
            return Int64(index + 1)
        }
        var deltas: [Duration] = []
        for (k, record) in driven.records.enumerated() {
            guard let known = await listener.deltaKnown(for: k + 1) else {
                throw BenchmarkError("PostgreSQL: no refetch covered write \(k + 1) of \(shape) \(pace)")
            }
            deltas.append(known - record.start)
        }
        let serverSeconds = server.cpuSeconds().flatMap { end in serverCPU.map { end - $0 } }
        let clientSeconds = CPUTime.current() - clientCPU
        let totals = listener.deltaTotals
        let refetches = listener.refetchCount
        await listener.stop()
        let name = "pg-notify.\(shape.rawValue).\(pace.rawValue).\(side)"
        return (
            Self.phase(
                side, shape, pace, deltas: deltas, driven: driven, serverSeconds: serverSeconds,
                clientSeconds: clientSeconds, refetches: refetches,
                diffed: "\(totals.inserted) in, \(totals.removed) out, \(totals.updated) re-keyed"),
            Self.measurement(
                name, deltas: deltas, driven: driven, serverSeconds: serverSeconds, clientSeconds: clientSeconds),
            driven.records.map { $0.save.milliseconds }
        )
    }

    private func depotPhase(
        _ shape: Shape, _ pace: Pace, _ writes: [Write], daemon: DaemonProcess, writer: DepotConnection,
        watcher: DepotConnection
    ) async throws -> (phase: Phase, measurement: Measurement, saves: [Double]) {
        let subscribeStart = ContinuousClock.now
        let subscription = try await watcher.call(
            ResultsSubscribe.self, .init(request: shape.request, include: shape == .window ? .all : .noObjects),
            timeout: .seconds(600))
        let subscribeMs = (ContinuousClock.now - subscribeStart).milliseconds
        let arrivals = ArrivalLog(watcher, subscription: subscription.subscription)
        let label = "pg-notify.\(shape.rawValue).\(pace.rawValue).depot"
        let perf = PerfRecorder(pid: daemon.pid, label: label)
        let serverCPU = CPUTime.process(daemon.pid)
        let clientCPU = CPUTime.current()
        let driven = try await Self.drive(writes, pace) { write, _ in
            var values: [String: JSONValue] = [:]
            if let score = write.score { values["score"] = .int(Int64(score)) }
            if let bucket = write.bucket { values["bucket"] = .int(Int64(bucket)) }
            return try await writer.call(
                StoreSave.self, .init(updated: [UpdatedObject(id: "Ranked/\(write.id)", values: values)])
            ).transaction
        }
        var deltas: [Duration] = []
        for (k, record) in driven.records.enumerated() {
            guard let arrived = await arrivals.arrival(through: record.token) else {
                throw BenchmarkError("Depot: no didChange through transaction \(record.token) (write \(k + 1))")
            }
            deltas.append(arrived - record.start)
        }
        let serverSeconds = CPUTime.process(daemon.pid).flatMap { end in serverCPU.map { end - $0 } }
        let clientSeconds = CPUTime.current() - clientCPU
        perf.stop()
        _ = try await watcher.call(ResultsUnsubscribe.self, .init(subscription: subscription.subscription))
        return (
            Self.phase(
                "depot", shape, pace, deltas: deltas, driven: driven, serverSeconds: serverSeconds,
                clientSeconds: clientSeconds, subscribeMs: subscribeMs),
            Self.measurement(
                label, deltas: deltas, driven: driven, serverSeconds: serverSeconds, clientSeconds: clientSeconds),
            driven.records.map { $0.save.milliseconds }
        )
    }

    // MARK: - Writes

    /// What ``drive(_:_:save:)`` timed.
    struct Driven {
        /// Per write: when its save started, how long it took, and its token (Depot: the
        /// transaction; PostgreSQL: which notification it makes).
        var records: [(start: ContinuousClock.Instant, save: Duration, token: Int64)]
        /// From the first save's start to the last one's end.
        var seconds: Double
    }

    /// Runs `writes` through `save` at `pace`, timing each save.
    private static func drive(
        _ writes: [Write], _ pace: Pace, save: (Write, Int) async throws -> Int64
    ) async throws -> Driven {
        var records: [(start: ContinuousClock.Instant, save: Duration, token: Int64)] = []
        records.reserveCapacity(writes.count)
        let first = ContinuousClock.now
        for (index, write) in writes.enumerated() {
            if pace == .spaced { try await Task.sleep(until: first + spacing * index, clock: .continuous) }
            let start = ContinuousClock.now
            let token = try await save(write, index)
            records.append((start, ContinuousClock.now - start, token))
        }
        return Driven(records: records, seconds: (ContinuousClock.now - first).seconds)
    }

    /// `count` writes over `rows` rows, each changing `shape`'s results: rows picked far from the
    /// results enter them, move within them, then leave (their seeded values back).
    static func writes(_ shape: Shape, count: Int, rows: Int, using generator: inout some RandomNumberGenerator)
        -> [Write]
    {
        // A score strictly between two seeded scores, in the window's range or anywhere.
        func between(_ upper: Int) -> Int {
            Int.random(in: 1..<upper, using: &generator) * 1000 + Int.random(in: 1...999, using: &generator)
        }
        var writes: [Write] = []
        while writes.count < count {
            let id = Int.random(in: 1...rows, using: &generator)
            switch shape {
            case .window:
                guard score(of: id, rows: rows) > 1000 * 1000 else { continue }
                writes += [
                    Write(id: id, score: between(windowSize)), Write(id: id, score: between(windowSize)),
                    Write(id: id, score: score(of: id, rows: rows)),
                ]
            case .filter:
                guard bucket(of: id) != filterBucket else { continue }
                writes += [
                    Write(id: id, bucket: filterBucket), Write(id: id, score: between(rows)),
                    Write(id: id, score: score(of: id, rows: rows), bucket: bucket(of: id)),
                ]
            }
        }
        return Array(writes.prefix(count))
    }

    /// The single-row `UPDATE` (autocommit) of `write`.
    private static func update(_ write: Write) -> PostgresQuery {
        switch (write.score, write.bucket) {
        case (let score?, let bucket?):
            "UPDATE ranked SET score = \(score), bucket = \(bucket) WHERE id = \(write.id)"
        case (let score?, nil): "UPDATE ranked SET score = \(score) WHERE id = \(write.id)"
        case (nil, let bucket?): "UPDATE ranked SET bucket = \(bucket) WHERE id = \(write.id)"
        case (nil, nil): "SELECT 1"
        }
    }

    // MARK: - Setup

    /// The channel the trigger notifies.
    static let channel = "ranked_changed"

    /// The table, filled by `generate_series` in one statement, its indexes built after the rows.
    private static func seedPostgres(_ rows: Int, _ connection: PostgresConnection, logger: Logger) async throws {
        for statement in [
            "CREATE TABLE ranked (id bigint PRIMARY KEY, name text NOT NULL, score bigint NOT NULL, bucket bigint NOT NULL)",
            "INSERT INTO ranked SELECT g, 'item ' || g, ((g * 7919) % \(rows) + 1) * 1000, g % \(buckets) FROM generate_series(1::bigint, \(rows)::bigint) g",
            "CREATE INDEX ranked_score ON ranked (score)",
            "CREATE INDEX ranked_bucket ON ranked (bucket)",
        ] {
            _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        _ = try await connection.query("VACUUM ANALYZE ranked", logger: logger)
    }

    /// The row trigger that calls `pg_notify` with the changed row's id, after the seed.
    private static func createTrigger(_ connection: PostgresConnection, logger: Logger) async throws {
        for statement in [
            """
            CREATE FUNCTION ranked_notify() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('\(channel)', (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)::text);
                RETURN NULL;
            END $$
            """,
            "CREATE TRIGGER ranked_changed AFTER INSERT OR UPDATE OR DELETE ON ranked FOR EACH ROW EXECUTE FUNCTION ranked_notify()",
        ] {
            _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
    }

    /// The same rows in Depot: the model through the daemon, the rows straight into its file.
    private static func seedDepot(_ rows: Int, daemon: DaemonProcess, writer: DepotConnection) async throws {
        let entity = EntityDescription(
            name: "Ranked",
            attributes: [
                AttributeDescription(name: "name", type: .string),
                AttributeDescription(name: "score", type: .integer, indexed: true),
                AttributeDescription(name: "bucket", type: .integer, indexed: true),
            ])
        _ = try await writer.call(ModelDefine.self, .init(entities: [entity]))
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        try daemon.insertDirectly(
            rows, with: #"INSERT INTO "e_Ranked" (id, _version, "name", "score", "bucket") VALUES (?, 1, ?, ?, ?)"#
        ) { statement, index in
            sqlite3_bind_int64(statement, 1, Int64(index))
            sqlite3_bind_text(statement, 2, "item \(index)", -1, transient)
            sqlite3_bind_int64(statement, 3, Int64(score(of: index, rows: rows)))
            sqlite3_bind_int64(statement, 4, Int64(bucket(of: index)))
        }
    }

    // MARK: - Figures

    private static func phase(
        _ side: String, _ shape: Shape, _ pace: Pace, deltas: [Duration], driven: Driven, serverSeconds: Double?,
        clientSeconds: Double, refetches: Int? = nil, diffed: String? = nil, subscribeMs: Double? = nil
    ) -> Phase {
        let deltaMs = deltas.map(\.milliseconds)
        let saveMs = driven.records.map { $0.save.milliseconds }
        let writes = Double(max(1, deltas.count))
        return Phase(
            side: side, shape: shape.rawValue, pace: pace.rawValue, writes: deltas.count,
            deltaP50Ms: percentile(deltaMs, 0.5), deltaP99Ms: percentile(deltaMs, 0.99),
            saveP50Ms: percentile(saveMs, 0.5), saveP99Ms: percentile(saveMs, 0.99),
            afterSaveP50Ms: percentile(zip(deltaMs, saveMs).map { $0 - $1 }, 0.5),
            serverCPUMicrosPerWrite: serverSeconds.map { $0 * 1e6 / writes },
            clientCPUMicrosPerWrite: clientSeconds * 1e6 / writes, refetches: refetches, diffed: diffed,
            subscribeMs: subscribeMs)
    }

    /// A phase as a row of the table: per write, save → delta known; the server's CPU (PostgreSQL's
    /// processes or `depotd`) in the `d` column, this process's (writer, listener, diffs) in `s`.
    private static func measurement(
        _ name: String, deltas: [Duration], driven: Driven, serverSeconds: Double?, clientSeconds: Double
    ) -> Measurement {
        Measurement(
            name: name, unit: "save→delta", iterations: deltas.count, seconds: driven.seconds,
            latencies: deltas.map { UInt64(max(0, $0.seconds) * 1e9) }.sorted(), rounds: [],
            daemonCPUSeconds: serverSeconds, selfCPUSeconds: clientSeconds)
    }
}
