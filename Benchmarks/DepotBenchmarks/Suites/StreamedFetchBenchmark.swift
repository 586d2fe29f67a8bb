/// A streamed (partialResultToken) fetch of 1M Items against a raw sqlite3_step scan that reads the same columns.
///
/// Pending: registered so that every run lists it. To implement, replace
/// `pendingReason` with nil and write `run(_:)` with the helpers in
/// `Support/` (DaemonProcess, RawRPCClient, RawSQLite, ProcessMemory/MemorySampler).
struct StreamedFetchBenchmark: Benchmark {
    static let name = "streamed-fetch"
    static let summary = "streamed async fetch (partialResultToken) of 1M Items vs a raw C scan"
    static let pendingReason: String? = "waits for the 1M-row fixture and streamed fetch tuning"

    func run(_ suite: SuiteRun) async throws {
        throw BenchmarkError(Self.pendingReason ?? "not implemented")
    }
}
