import Foundation

/// Prints suite reports as aligned tables on standard output.
enum ResultsTable {
    /// Prints one suite: its measurements, then its ratios with their targets.
    static func print(_ report: SuiteReport) {
        Swift.print("\n== \(report.name): \(report.summary)")
        guard report.status != "pending" else {
            Swift.print("   pending: \(report.message ?? "")")
            return
        }
        if !report.measurements.isEmpty {
            Swift.print(
                row(
                    [
                        "measurement", "unit", "iterations", "per second", "p50 µs", "p99 µs", "mean µs", "cpu µs d+s",
                        "rounds/s",
                    ],
                    widths: [30, 11, 10, 11, 8, 8, 8, 12, 0]))
            for measurement in report.measurements {
                let rounds = measurement.rounds.map { compact($0) }.joined(separator: " ")
                Swift.print(
                    row(
                        [
                            measurement.name, measurement.unit, "\(measurement.iterations)",
                            compact(measurement.throughput),
                            micro(measurement.p50), micro(measurement.p99), micro(measurement.mean), cpu(measurement),
                            rounds,
                        ], widths: [30, 11, 10, 11, 8, 8, 8, 12, 0]))
            }
        }
        for ratio in report.ratios {
            let verdict = ratio.passed.map { $0 ? "PASS" : "MISS" } ?? ""
            Swift.print(
                "   check \(ratio.name.padding(toLength: 28, withPad: " ", startingAt: 0)) \(String(format: "%9.3f", ratio.value))  target \(ratio.targetText.padding(toLength: 8, withPad: " ", startingAt: 0)) \(verdict.padding(toLength: 4, withPad: " ", startingAt: 0))  (\(ratio.numerator) / \(ratio.denominator))"
            )
        }
        for (key, value) in report.notes.sorted(by: { $0.key < $1.key }) {
            Swift.print("   note  \(key): \(value.excerpt(limit: 100))")
        }
        if report.status == "failed" {
            Swift.print("   FAILED: \(report.message ?? "")")
        }
    }

    /// Prints every ratio of the run with its verdict.
    static func printSummary(_ reports: [SuiteReport]) {
        Swift.print("\n== summary")
        for report in reports {
            if report.status != "ran" {
                Swift.print("   \(report.name): \(report.status)")
                continue
            }
            for ratio in report.ratios {
                let verdict = ratio.passed.map { $0 ? "PASS" : "MISS" } ?? "-"
                Swift.print(
                    "   \(verdict.padding(toLength: 5, withPad: " ", startingAt: 0)) \(ratio.name.padding(toLength: 30, withPad: " ", startingAt: 0)) \(String(format: "%9.3f", ratio.value))  target \(ratio.targetText)"
                )
            }
        }
    }

    private static func row(_ cells: [String], widths: [Int]) -> String {
        var line = "   "
        for (cell, width) in zip(cells, widths) {
            line += width > 0 ? cell.padding(toLength: max(width, cell.count), withPad: " ", startingAt: 0) + " " : cell
        }
        return line
    }

    private static func compact(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value)
    }

    /// Daemon + self CPU µs per iteration (`-` for the daemon when there is none).
    private static func cpu(_ measurement: Measurement) -> String {
        let daemon = measurement.daemonCPUMicros.map { String(format: "%.0f", $0) } ?? "-"
        return "\(daemon)+\(String(format: "%.0f", measurement.selfCPUMicros))"
    }

    private static func micro(_ nanoseconds: Double) -> String { String(format: "%.1f", nanoseconds / 1000) }
}
