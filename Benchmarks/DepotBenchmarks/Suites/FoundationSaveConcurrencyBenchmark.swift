/// The first, single-shot version of the ping and save comparison, kept for
/// its figure the ping and save suites do not have: saves/s with several
/// clients at once. Runs ``FoundationBenchmark`` and reports its figures.
struct FoundationSaveConcurrencyBenchmark: Benchmark {
    static let name = "foundation"
    static let summary = "single-shot ping/save ratios (tcp) and save throughput with concurrent clients vs raw commits"

    func run(_ suite: SuiteRun) async throws {
        let report = try await FoundationBenchmark(iterations: suite.options.quick ? 2_000 : 20_000).run(
            depotd: suite.options.depotd)
        suite.noteReport(report)
        suite.check("foundation.ping", report.pingRatio, target: 0.5, of: "depotd ping/s", over: "raw echo/s")
        suite.check("foundation.save", report.saveRatio, target: 0.3, of: "depotd saves/s", over: "raw commits/s")
        suite.check(
            "foundation.save-\(report.concurrentClients)-clients", report.concurrentSaveRatio, target: nil,
            of: "depotd saves/s, \(report.concurrentClients) clients", over: "raw commits/s")
    }
}
