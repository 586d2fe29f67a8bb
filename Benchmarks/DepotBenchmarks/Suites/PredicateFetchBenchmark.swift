/// `store/fetch` with `name CONTAINS[cd] $q` over 1M Items (100k with `--quick`)
/// against the same SQL run raw through the C API, plus predicate
/// parse+compile time. Runs ``PredicateBenchmark`` and reports its figures.
struct PredicateFetchBenchmark: Benchmark {
    static let name = "predicate-fetch"
    static let summary = "CONTAINS[cd] fetch over 1M Items: raw SQL time / depotd time (target ≥ 0.8); parse+compile µs"

    func run(_ suite: SuiteRun) async throws {
        let report = try await PredicateBenchmark(rows: suite.options.quick ? 100_000 : 1_000_000).run(
            depotd: suite.options.depotd)
        suite.noteReport(report)
        suite.check("predicate.contains-cd", report.ratio, target: 0.8, of: "raw SQL ms", over: "depotd fetch ms")
        suite.check(
            "predicate.parse-compile-us", report.parseCompileMicroseconds, target: nil, .atMost, of: "µs for 10 clauses"
        )
    }
}
