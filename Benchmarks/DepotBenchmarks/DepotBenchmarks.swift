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

    @Option(parsing: .remaining, help: .hidden)
    var fanOutChild: [String] = []

    mutating func run() async throws {
        // A child process of the fan-out suite, not a run.
        if !fanOutChild.isEmpty { return try FanOutBenchmark.runChild(fanOutChild) }
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
        let options = BenchmarkOptions(depotd: executable, plan: plan, quick: quick, daemonArguments: [])
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
