import DepotProtocol
import Foundation

/// One benchmark suite: a named group of measurements of Depot side by side
/// with a raw baseline measured in the same run.
///
/// A suite is a type in `Suites/`, listed in ``BenchmarkRegistry/all``. Its
/// ``run(_:)`` records measurements and ratios on the ``SuiteRun`` it gets:
///
/// ```swift
/// struct EchoBenchmark: Benchmark {
///     static let name = "echo"
///     static let summary = "what it compares"
///     func run(_ suite: SuiteRun) async throws {
///         let measured = try await suite.sampler.measure([depotCase, rawCase])
///         suite.record(measured)
///         suite.compare("echo", measured[0], to: measured[1], target: 0.5)
///     }
/// }
/// ```
protocol Benchmark: Sendable {
    /// The suite's name, matched by `--filter`.
    static var name: String { get }
    /// One line: what is compared with what, and the target.
    static var summary: String { get }
    /// Why the suite does not run yet (a later issue); `nil` when it runs.
    static var pendingReason: String? { get }

    /// Creates the suite.
    init()

    /// Measures, recording results on `suite`.
    func run(_ suite: SuiteRun) async throws
}

extension Benchmark {
    static var pendingReason: String? { nil }
}

/// What a suite works with while it runs, and what it has recorded.
final class SuiteRun {
    /// The suite's name.
    let name: String
    /// The run's options.
    let options: BenchmarkOptions
    /// The sampler following the run's plan (full or quick).
    let sampler: Sampler
    /// A fresh directory for the suite's databases and sockets, removed afterwards.
    let directory: URL
    private(set) var measurements: [Measurement] = []
    private(set) var ratios: [Ratio] = []
    private(set) var notes: [String: JSONValue] = [:]

    init(name: String, options: BenchmarkOptions, directory: URL) {
        self.name = name
        self.options = options
        self.sampler = Sampler(plan: options.plan)
        self.directory = directory
    }

    /// Records measurements.
    func record(_ measured: [Measurement]) { measurements += measured }

    /// Records `depot`'s throughput over `baseline`'s as the ratio `name`.
    func compare(_ name: String, _ depot: Measurement, to baseline: Measurement, target: Double?) {
        let value = baseline.throughput > 0 ? depot.throughput / baseline.throughput : 0
        ratios.append(
            Ratio(name: name, numerator: depot.name, denominator: baseline.name, value: value, target: target))
    }

    /// Records a figure computed by the suite itself against its target.
    func check(
        _ name: String, _ value: Double, target: Double?, _ direction: Ratio.Direction = .atLeast, of numerator: String,
        over denominator: String = ""
    ) {
        ratios.append(
            Ratio(
                name: name, numerator: numerator, denominator: denominator, value: value, target: target,
                direction: direction))
    }

    /// Records a suite's whole `Codable` report as the note `report`.
    func noteReport(_ report: some Encodable) {
        notes["report"] = (try? JSONCoding.encode(report)) ?? .null
    }

    /// Records a free-form figure (daemon memory, sizes, counts).
    func note(_ key: String, _ value: JSONValue) { notes[key] = value }

    /// Starts a `depotd` for this suite on `transport`, in a subdirectory, with `extraArguments`.
    func startDaemon(_ transport: DaemonProcess.Transport, label: String = "depotd", extraArguments: [String] = [])
        throws -> DaemonProcess
    {
        try DaemonProcess(
            executable: options.depotd, dataDirectory: directory.appendingPathComponent(label),
            transport: transport, extraArguments: options.daemonArguments + extraArguments)
    }
}

/// The suite's outcome, as printed and written.
struct SuiteReport {
    /// The suite's name.
    var name: String
    /// The suite's summary.
    var summary: String
    /// `ran`, `failed` or `pending`.
    var status: String
    /// Why it failed or is pending.
    var message: String?
    /// What it measured.
    var measurements: [Measurement] = []
    /// Its ratios.
    var ratios: [Ratio] = []
    /// Its notes.
    var notes: [String: JSONValue] = [:]

    /// The JSON written to the results file.
    var json: JSONValue {
        [
            "name": .string(name),
            "summary": .string(summary),
            "status": .string(status),
            "message": message.map { .string($0) } ?? .null,
            "measurements": .array(measurements.map(\.json)),
            "ratios": .array(ratios.map(\.json)),
            "notes": .object(notes),
        ]
    }
}
