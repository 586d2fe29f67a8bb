import ArgumentParser
import Foundation

/// What a run was asked to do.
struct BenchmarkOptions: Sendable {
    /// The `depotd` executable to start.
    var depotd: URL
    /// How long to measure.
    var plan: SamplingPlan
    /// Whether this is a smoke run.
    var quick: Bool
    /// Extra arguments for every `depotd` started.
    var daemonArguments: [String]
    /// What the `sessions` suite opens and measures.
    var sessions = SessionScaleOptions()
}

/// The `sessions` suite's sizes (issue 37), from the command line.
struct SessionScaleOptions: Sendable {
    /// Session counts measured without keys.
    var plain = [1_000, 5_000, 10_000]
    /// Session counts measured again with CURVE keys and owner scopes.
    var curve = [1_000, 10_000]
    /// Saves broadcast to every session, per count.
    var broadcasts = 20
    /// Seconds of idle heartbeating measured, per count.
    var idleSeconds = 30.0
    /// Whether to record a `perf` profile of the daemon during each phase.
    var profile = false
}

/// `DepotBenchmarks`: runs the suites side by side with their raw baselines,
/// prints a table and writes `<output>/<timestamp>.json` and `<output>/latest.json`.
@main
struct DepotBenchmarks: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "DepotBenchmarks",
        abstract: "Measure Depot against raw SQLite and raw libzmq in the same run.")

    @Option(help: "The depotd executable (a release build).")
    var depotd = ".build/release/depotd"

    @Option(help: "Where to write <timestamp>.json and latest.json; nothing is written when empty.")
    var output = "Benchmarks/results"

    @Option(help: "Run only suites whose name contains this text (repeatable).")
    var filter: [String] = []

    @Flag(help: "A smoke run: short warm-up and measurement, one round.")
    var quick = false

    @Option(help: "Timed seconds per case (overrides the plan).")
    var duration: Double?

    @Option(help: "Interleaved rounds per case (overrides the plan).")
    var rounds: Int?

    @Flag(help: "List the suites and exit.")
    var list = false

    @Option(help: "sessions suite: session counts without keys (repeatable; default 1000, 5000, 10000).")
    var sessions: [Int] = []

    @Option(
        help:
            "sessions suite: session counts with CURVE keys and owner scopes (repeatable; default 1000, 10000; 0 for none)."
    )
    var curveSessions: [Int] = []

    @Option(help: "sessions suite: saves broadcast to every session, per count (default 20).")
    var broadcasts: Int?

    @Option(help: "sessions suite: seconds of idle heartbeating measured per count (default 30).")
    var idleSeconds: Double?

    @Flag(help: "sessions suite: record a perf profile of depotd during each phase (summaries in the notes).")
    var profile = false

    @Option(parsing: .remaining, help: .hidden)
    var fanOutChild: [String] = []

    @Flag(help: .hidden)
    var routerChild = false

    mutating func run() async throws {
        // A child process of the fan-out suite, not a run.
        if !fanOutChild.isEmpty { return try FanOutBenchmark.runChild(fanOutChild) }
        if routerChild { return try RouterChild.runChild() }
        if list {
            for suite in BenchmarkRegistry.all {
                print(
                    "\(suite.name.padding(toLength: 18, withPad: " ", startingAt: 0)) \(suite.pendingReason == nil ? "" : "[pending] ")\(suite.summary)"
                )
            }
            return
        }
        var plan = quick ? SamplingPlan.quick : SamplingPlan.full
        if let duration { plan.duration = duration }
        if let rounds { plan.rounds = max(1, rounds) }
        let executable = URL(fileURLWithPath: depotd).standardizedFileURL
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw ValidationError(
                "no depotd at \(executable.path): build it with `swift build -c release --product depotd`")
        }
        var options = BenchmarkOptions(depotd: executable, plan: plan, quick: quick, daemonArguments: [])
        if !sessions.isEmpty { options.sessions.plain = sessions }
        if !curveSessions.isEmpty { options.sessions.curve = curveSessions.filter { $0 > 0 } }
        if let broadcasts { options.sessions.broadcasts = max(1, broadcasts) }
        if let idleSeconds { options.sessions.idleSeconds = idleSeconds }
        options.sessions.profile = profile
        let suites = BenchmarkRegistry.selected(by: filter)
        guard !suites.isEmpty else { throw ValidationError("no suite matches \(filter); try --list") }

        var reports: [SuiteReport] = []
        for suite in suites {
            let report = await BenchmarkRunner.run(suite, options: options)
            ResultsTable.print(report)
            reports.append(report)
        }
        ResultsTable.printSummary(reports)
        if !output.isEmpty {
            let file = ResultsFile(options: options, filters: filter, reports: reports)
            let written = try file.write(to: URL(fileURLWithPath: output, isDirectory: true))
            print("results: \(written.path)")
        }
    }
}

/// Runs one suite in its own temporary directory and turns the outcome into a report.
enum BenchmarkRunner {
    /// Runs `suite` (or reports it pending).
    static func run(_ suite: any Benchmark.Type, options: BenchmarkOptions) async -> SuiteReport {
        var report = SuiteReport(name: suite.name, summary: suite.summary, status: "ran")
        if let reason = suite.pendingReason {
            report.status = "pending"
            report.message = reason
            return report
        }
        let directory = URL(fileURLWithPath: "/tmp", isDirectory: true)
            .appendingPathComponent("depot-bench-\(getpid())-\(suite.name)")
        try? FileManager.default.removeItem(at: directory)
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let run = SuiteRun(name: suite.name, options: options, directory: directory)
            do {
                try await suite.init().run(run)
            } catch {
                report.status = "failed"
                report.message = "\(error)"
            }
            report.measurements = run.measurements
            report.ratios = run.ratios
            report.notes = run.notes
        } catch {
            report.status = "failed"
            report.message = "\(error)"
        }
        return report
    }
}
