/// A predicate fetch over 1M Items against raw SQLite running the equivalent SQL, plus the cost of parsing and compiling the predicate alone.
///
/// Pending: registered so that every run lists it. To implement, replace
/// `pendingReason` with nil and write `run(_:)` with the helpers in
/// `Support/` (DaemonProcess, RawRPCClient, RawSQLite, ProcessMemory/MemorySampler).
struct PredicateFetchBenchmark: Benchmark {
    static let name = "predicate-fetch"
    static let summary = "store/fetch name CONTAINS[cd] $q over 1M Items vs a raw C scan with the same SQL; predicate parse+compile µs"
    static let pendingReason: String? = "waits for the predicate language (predicate branch)"

    func run(_ suite: SuiteRun) async throws {
        throw BenchmarkError(Self.pendingReason ?? "not implemented")
    }
}
