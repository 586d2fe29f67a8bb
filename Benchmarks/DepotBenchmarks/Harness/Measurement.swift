import DepotProtocol

/// One measured operation: its per-iteration latencies and its throughput.
///
/// Throughput is iterations divided by the wall time of the timed loops (so it
/// includes the loop's own overhead, as a user's loop would); latencies are
/// per iteration. `rounds` keeps the throughput of each interleaved round so
/// that drift on a shared machine shows as spread.
struct Measurement: Sendable {
    /// A dotted name, unique in its suite: `ping.ipc.depot`.
    var name: String
    /// What one iteration is: `round trip`, `commit`.
    var unit: String
    /// How many iterations were timed (warm-up excluded).
    var iterations: Int
    /// Seconds spent in the timed loops.
    var seconds: Double
    /// Per-iteration latencies in nanoseconds, sorted ascending.
    var latencies: [UInt64]
    /// Throughput of each round, iterations per second.
    var rounds: [Double]
    /// CPU seconds the daemon spent during the timed loops (`nil` without a daemon).
    var daemonCPUSeconds: Double?
    /// CPU seconds this process (client, in-process baseline) spent during the timed loops.
    var selfCPUSeconds: Double = 0

    /// Iterations per second over every round.
    var throughput: Double { seconds > 0 ? Double(iterations) / seconds : 0 }

    /// The latency at quantile `q` (0...1), nanoseconds.
    func percentile(_ q: Double) -> Double {
        guard !latencies.isEmpty else { return 0 }
        let index = min(latencies.count - 1, Int((Double(latencies.count - 1) * q).rounded()))
        return Double(latencies[index])
    }

    /// The median latency, nanoseconds.
    var p50: Double { percentile(0.5) }
    /// The 99th-percentile latency, nanoseconds.
    var p99: Double { percentile(0.99) }
    /// The mean latency, nanoseconds.
    var mean: Double {
        guard !latencies.isEmpty else { return 0 }
        return Double(latencies.reduce(0, &+)) / Double(latencies.count)
    }

    /// The daemon's CPU microseconds per iteration: load-independent cost of the server side.
    var daemonCPUMicros: Double? { daemonCPUSeconds.map { iterations > 0 ? $0 * 1e6 / Double(iterations) : 0 } }
    /// This process's CPU microseconds per iteration.
    var selfCPUMicros: Double { iterations > 0 ? selfCPUSeconds * 1e6 / Double(iterations) : 0 }

    /// The JSON written to the results file.
    var json: JSONValue {
        [
            "cpuMicrosPerIteration": [
                "daemon": daemonCPUMicros.map { .double($0) } ?? .null, "self": .double(selfCPUMicros),
            ],
            "name": .string(name),
            "unit": .string(unit),
            "iterations": .int(Int64(iterations)),
            "seconds": .double(seconds),
            "throughputPerSecond": .double(throughput),
            "roundsPerSecond": .array(rounds.map { .double($0) }),
            "latencyNanoseconds": [
                "p50": .double(p50), "p90": .double(percentile(0.9)), "p99": .double(p99),
                "mean": .double(mean), "min": .double(percentile(0)), "max": .double(percentile(1)),
            ],
        ]
    }
}

/// A figure checked against the target: usually Depot's throughput
/// over a baseline's (higher is better), sometimes a bound (latency, memory).
struct Ratio: Sendable {
    /// Which way the target points.
    enum Direction: String, Sendable {
        /// Pass when `value >= target` (ratios, throughput).
        case atLeast
        /// Pass when `value <= target` (latency, memory).
        case atMost
    }

    /// A dotted name: `ping.ipc`.
    var name: String
    /// The measurement on top (Depot), or what the value is.
    var numerator: String
    /// The measurement below (the raw baseline), or the value's unit.
    var denominator: String
    /// `numerator.throughput / denominator.throughput`, or the figure itself.
    var value: Double
    /// The target from the issue; `nil` for information only.
    var target: Double?
    /// Which way the target points.
    var direction: Direction = .atLeast

    /// Whether the target is met (`nil` without a target).
    var passed: Bool? {
        target.map { direction == .atLeast ? value >= $0 : value <= $0 }
    }

    /// The target as text: `≥ 0.50`, `≤ 200`.
    var targetText: String {
        guard let target else { return "(info)" }
        return (direction == .atLeast ? "≥ " : "≤ ") + String(format: target < 10 ? "%.2f" : "%.0f", target)
    }

    /// The JSON written to the results file.
    var json: JSONValue {
        [
            "name": .string(name),
            "numerator": .string(numerator),
            "denominator": .string(denominator),
            "value": .double(value),
            "target": target.map { .double($0) } ?? .null,
            "direction": .string(direction.rawValue),
            "passed": passed.map { .bool($0) } ?? .null,
        ]
    }
}
