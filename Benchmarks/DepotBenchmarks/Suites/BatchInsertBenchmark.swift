/// One store/batchInsert of 1M Items against raw prepared INSERTs in one SQLite transaction.
///
/// Pending: registered so that every run lists it. To implement, replace
/// `pendingReason` with nil and write `run(_:)` with the helpers in
/// `Support/` (DaemonProcess, RawRPCClient, RawSQLite, ProcessMemory/MemorySampler).
struct BatchInsertBenchmark: Benchmark {
    static let name = "batch-insert"
    static let summary = "store/batchInsert of 1M Items vs raw prepared inserts in one transaction"
    static let pendingReason: String? = "waits for store/batchInsert (batch branch)"

    func run(_ suite: SuiteRun) async throws {
        throw BenchmarkError(Self.pendingReason ?? "not implemented")
    }
}
