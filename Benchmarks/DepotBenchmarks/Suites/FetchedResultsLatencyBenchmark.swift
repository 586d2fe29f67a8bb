/// The time from a committed save to its `results/didChange` at the
/// subscriber, against a client that refetches and diffs, and the daemon
/// memory per subscribed row. Runs ``FetchedResultsBenchmark`` and reports its figures.
struct FetchedResultsLatencyBenchmark: Benchmark {
    static let name = "results-latency"
    static let summary =
        "save → results/didChange p50/p99 vs refetch-and-diff (≥ 100×), p50 < 0.5 ms, p99 < 2 ms, RSS < 64 B/row"

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let report = try await FetchedResultsBenchmark(rows: quick ? 50_000 : 1_000_000, samples: quick ? 50 : 300)
            .run(depotd: suite.options.depotd)
        suite.noteReport(report)
        suite.check(
            "results.speedup-p50", report.speedupP50, target: 100, of: "refetch-and-diff p50", over: "didChange p50")
        suite.check("results.didChange-p50-ms", report.incrementalP50Ms, target: 0.5, .atMost, of: "ms")
        suite.check("results.didChange-p99-ms", report.incrementalP99Ms, target: 2, .atMost, of: "ms")
        suite.check("results.rss-bytes-per-row", report.rssBytesPerRow, target: 64, .atMost, of: "bytes")
    }
}
