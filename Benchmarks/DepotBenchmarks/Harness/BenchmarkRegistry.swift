import Foundation

/// Every suite, in the order they run. Add a suite here after writing its file in `Suites/`.
enum BenchmarkRegistry {
    /// The suites.
    static let all: [any Benchmark.Type] = [
        PingBenchmark.self,
        SaveBenchmark.self,
        FoundationSaveConcurrencyBenchmark.self,
        PredicateFetchBenchmark.self,
        FetchedResultsLatencyBenchmark.self,
        ResultsReadsBenchmark.self,
        BatchInsertBenchmark.self,
        BackupBenchmark.self,
        HistoryBenchmark.self,
        SaveBehindBatchBenchmark.self,
        SubscriptionCostBenchmark.self,
        GroupedResultsBenchmark.self,
        FanOutBenchmark.self,
        CurveBenchmark.self,
        ScopeCostBenchmark.self,
        PrefetchBenchmark.self,
        ClusterBenchmark.self,
        ClusterJoinBenchmark.self,
        ClusterLogSizeBenchmark.self,
        ReplicaBenchmark.self,
        SessionScaleBenchmark.self,
        ListenNotifyBenchmark.self,
    ]

    /// The suites whose name contains one of `filters` (all when empty).
    static func selected(by filters: [String]) -> [any Benchmark.Type] {
        guard !filters.isEmpty else { return all }
        return all.filter { suite in filters.contains { suite.name.localizedCaseInsensitiveContains($0) } }
    }
}
