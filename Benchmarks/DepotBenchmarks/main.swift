import DepotClient
import DepotProtocol
import Foundation
import ZeroMQ

// Usage: DepotBenchmarks --depotd PATH [--output DIR] [--quick] [--filter NAME]
let arguments = CommandLine.arguments
func option(_ name: String) -> String? {
    arguments.firstIndex(of: name).flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil }
}
let depotd = URL(fileURLWithPath: option("--depotd") ?? ".build/release/depotd")
let output = URL(fileURLWithPath: option("--output") ?? "Benchmarks/results")
let quick = arguments.contains("--quick")
let filter = option("--filter")

var results: [String: String] = [:]
if filter == "latency" {
    let daemon = try BenchmarkDaemon(executable: depotd)
    let client = try await DepotClient.DepotConnection.connect(to: daemon.endpoint)
    _ = try await client.call(DepotProtocol.ModelDefine.self, .init(entities: [DepotProtocol.EntityDescription(name: "Item", attributes: [DepotProtocol.AttributeDescription(name: "name", type: .string)])]))
    for (label, body) in [("ping", { () async throws -> Void in _ = try await client.call(DepotProtocol.Ping.self, DepotProtocol.Empty()) }),
                          ("save", { () async throws -> Void in _ = try await client.call(DepotProtocol.StoreSave.self, .init(inserted: [.init(entity: "Item", values: ["name": "x"])])) })] {
        var samples: [Double] = []
        for _ in 0..<2000 {
            let start = ContinuousClock.now
            try await body()
            samples.append((ContinuousClock.now - start).milliseconds)
        }
        print(label, "p50", percentile(samples, 0.5), "p99", percentile(samples, 0.99))
    }
    let context = try ZeroMQ.Context()
    let raw = try ZeroMQ.Socket(context: context, type: .dealer)
    try raw.connect(daemon.endpoint)
    var samples: [Double] = []
    let ping = Array(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.utf8)
    for _ in 0..<5000 {
        let start = ContinuousClock.now
        try raw.send(ping)
        _ = try raw.receive()
        samples.append((ContinuousClock.now - start).milliseconds)
    }
    print("raw ping p50", percentile(samples, 0.5), "p99", percentile(samples, 0.99))
    let router = try ZeroMQ.Socket(context: context, type: .router)
    try router.bind("tcp://127.0.0.1:*")
    let echo = try ZeroMQ.Socket(context: context, type: .dealer)
    try echo.connect(try router.lastEndpoint())
    let thread = Thread {
        while let message = try? router.receive() { _ = try? router.send(message) }
    }
    thread.start()
    samples = []
    for _ in 0..<5000 {
        let start = ContinuousClock.now
        try echo.send(ping)
        _ = try echo.receive()
        samples.append((ContinuousClock.now - start).milliseconds)
    }
    print("raw echo p50", percentile(samples, 0.5), "p99", percentile(samples, 0.99))
    daemon.stop()
    exit(0)
}
if filter == nil || filter == "results" {
    let benchmark = FetchedResultsBenchmark(rows: quick ? 50_000 : 1_000_000, samples: quick ? 50 : 300)
    let report = try await benchmark.run(depotd: depotd)
    print(String(format: "fetched results over %d rows: save→didChange p50 %.3f ms, p99 %.3f ms; refetch-and-diff p50 %.1f ms, p99 %.1f ms; speedup %.0f×; %.1f bytes/row; subscribe %.2f s",
                 report.rows, report.incrementalP50Ms, report.incrementalP99Ms, report.refetchP50Ms, report.refetchP99Ms,
                 report.speedupP50, report.rssBytesPerRow, report.subscribeSeconds))
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    results["fetchedResults"] = String(decoding: try encoder.encode(report), as: UTF8.self)
}
try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
let json = "{" + results.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ",\n") + "}\n"
try json.write(to: output.appendingPathComponent("latest.json"), atomically: true, encoding: .utf8)
