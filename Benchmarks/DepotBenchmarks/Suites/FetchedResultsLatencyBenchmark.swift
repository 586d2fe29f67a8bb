/// The time from a committed save to its results/didChange at the subscriber, against a client that refetches and diffs; and the daemon memory each subscribed row costs.
///
/// Pending: registered so that every run lists it. To implement, replace
/// `pendingReason` with nil and write `run(_:)` with the helpers in
/// `Support/` (DaemonProcess, RawRPCClient, RawSQLite, ProcessMemory/MemorySampler).
struct FetchedResultsLatencyBenchmark: Benchmark {
    static let name = "results-latency"
    static let summary = "save → results/didChange latency p50/p99 vs refetch-and-diff in the client; daemon RSS per subscribed row"
    static let pendingReason: String? = "waits for results/subscribe and results/didChange (fetched-results engine)"

    func run(_ suite: SuiteRun) async throws {
        throw BenchmarkError(Self.pendingReason ?? "not implemented")
    }
}
