/// `store/batchInsert` of 1M Items (100k with `--quick`) against raw prepared
/// inserts in one transaction, a streamed (`partialResultToken`) fetch of them
/// against a raw `sqlite3_step` scan, and the daemon's peak RSS meanwhile.
/// Runs ``BatchBenchmark`` and reports its figures.
struct BatchInsertBenchmark: Benchmark {
    static let name = "batch"
    static let summary =
        "batchInsert 1M vs raw prepared inserts (≥ 0.5×), streamed fetch vs raw scan (≥ 0.3×), peak RSS < 200 MB"

    func run(_ suite: SuiteRun) async throws {
        let report = try await BatchBenchmark(rows: suite.options.quick ? 100_000 : 1_000_000).run(
            depotd: suite.options.depotd)
        suite.noteReport(report)
        suite.check(
            "batch.insert", report.insertRatio, target: 0.5, of: "batchInsert rows/s", over: "raw inserts rows/s")
        suite.check(
            "batch.streamed-fetch", report.fetchRatio, target: 0.3, of: "streamed fetch rows/s", over: "raw scan rows/s"
        )
        suite.check(
            "batch.peak-rss-mb", max(report.peakRSSAfterInsertMB, report.peakRSSAfterFetchMB), target: 200, .atMost,
            of: "MB")
    }
}
