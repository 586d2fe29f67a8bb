/// The daemon's peak resident memory while it serves the 1M-row suites, sampled with MemorySampler.
///
/// Pending: registered so that every run lists it. To implement, replace
/// `pendingReason` with nil and write `run(_:)` with the helpers in
/// `Support/` (DaemonProcess, RawRPCClient, RawSQLite, ProcessMemory/MemorySampler).
struct PeakMemoryBenchmark: Benchmark {
    static let name = "peak-rss"
    static let summary = "daemon peak RSS during the 1M-row suites (MemorySampler) vs the raw baseline process"
    static let pendingReason: String? = "waits for the 1M-row suites"

    func run(_ suite: SuiteRun) async throws {
        throw BenchmarkError(Self.pendingReason ?? "not implemented")
    }
}
