import DepotProtocol
import Foundation
import Synchronization

/// What a single save waits while 2,000-row batches run: sequential
/// one-object `store/save` latency alone, and again while another client
/// sends `store/batchInsert` of 2,000 Items back to back (one writer: a save
/// queues behind the batch in flight).
struct SaveBehindBatchBenchmark: Benchmark {
    static let name = "save-behind-batch"
    static let summary =
        "single-save latency p50/p99 alone and behind concurrent 2,000-row batchInserts (the writer is one queue)"

    func run(_ suite: SuiteRun) async throws {
        let daemon = try suite.startDaemon(.ipc, label: "behind-batch")
        defer { daemon.stop() }
        let rpc = try RawRPCClient(endpoint: daemon.endpoint)
        _ = try rpc.initialize()
        _ = try rpc.call("model/define", params: BenchmarkModel.defineParams)
        let count = suite.options.quick ? 100 : 600

        @Sendable func batchParams(_ batch: Int) -> String {
            let objects = (0..<2_000).map { index in
                #"{"name":"batch \#(batch)-\#(index)","createdAt":"\#(BenchmarkModel.itemDate.wire)","done":false}"#
            }
            return #"{"entity":"Item","objects":[\#(objects.joined(separator: ","))]}"#
        }
        // How long one 2,000-row batch holds the writer: the daemon's own commit timing
        // (server/stats), from a fresh daemon that has committed only these batches.
        for batch in 0..<10 { _ = try rpc.call("store/batchInsert", params: batchParams(-1 - batch)) }
        let hold = try rpc.call("server/stats")["latency"]?["commit"]?["p50Ms"]?.doubleValue ?? .nan
        suite.check("behind.batch-writer-hold-us", hold * 1000, target: nil, .atMost, of: "µs")

        func saveLatencies(offset: Int) throws -> [Double] {
            try (0..<count).map { index in
                let start = ContinuousClock.now
                _ = try rpc.call("store/save", params: BenchmarkModel.insertItemParams(offset + index))
                let elapsed = ContinuousClock.now - start
                return Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6
            }
        }
        let alone = try saveLatencies(offset: 0)

        let stop = Atomic<Bool>(false)
        let batchesDone = Atomic<Int>(0)
        let endpoint = daemon.endpoint
        let batcher = Thread {
            guard let client = try? RawRPCClient(endpoint: endpoint), (try? client.initialize()) != nil else { return }
            var batch = 0
            while !stop.load(ordering: .relaxed) {
                _ = try? client.call("store/batchInsert", params: batchParams(batch))
                batch += 1
                batchesDone.store(batch, ordering: .relaxed)
            }
        }
        batcher.start()
        // Let the first batch get going.
        while batchesDone.load(ordering: .relaxed) == 0 { try await Task.sleep(for: .milliseconds(5)) }
        let behind = try saveLatencies(offset: count)
        stop.store(true, ordering: .relaxed)

        func percentile(_ values: [Double], _ p: Double) -> Double {
            let sorted = values.sorted()
            return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
        }
        for (label, values) in [("alone", alone), ("batches", behind)] {
            suite.check("behind.\(label).p50-us", percentile(values, 0.5), target: nil, .atMost, of: "µs")
            suite.check("behind.\(label).p99-us", percentile(values, 0.99), target: nil, .atMost, of: "µs")
        }
        suite.check(
            "behind.p99-ratio", percentile(behind, 0.99) / percentile(alone, 0.99), target: nil, .atMost,
            of: "p99 behind batches", over: "p99 alone")
        suite.note("batchesDuringRun", .int(Int64(batchesDone.load(ordering: .relaxed))))
    }
}
