import Foundation

// DepotBenchmarks: side-by-side benchmarks, each against a baseline measured in
// the same run, printed as ratios and written as JSON.
//
//   DepotBenchmarks --depotd PATH [--output DIR] [--quick] [--filter foundation|results]

let arguments = CommandLine.arguments
func option(_ name: String) -> String? {
    arguments.firstIndex(of: name).flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil }
}
let depotd = URL(fileURLWithPath: option("--depotd") ?? ".build/release/depotd")
let output = URL(fileURLWithPath: option("--output") ?? "Benchmarks/results")
let quick = arguments.contains("--quick")
let filter = option("--filter")
func selected(_ name: String) -> Bool { filter == nil || filter == name }

/// One line of the summary: a measured ratio against its target.
struct Ratio: Codable {
    var name: String
    var value: Double
    var target: String
    var met: Bool
}

let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
var sections: [String: Data] = [:]
var ratios: [Ratio] = []

if selected("foundation") {
    let report = try await FoundationBenchmark(iterations: quick ? 2_000 : 20_000).run(depotd: depotd)
    print(
        String(
            format: "ping: raw echo %.0f/s, depotd (raw DEALER) %.0f/s, DepotConnection %.0f/s",
            report.rawEchoPerSecond, report.depotPingPerSecond, report.clientPingPerSecond))
    print(
        String(
            format: "save: raw SQLite %.0f commits/s, depotd (raw DEALER) %.0f/s, DepotConnection %.0f/s",
            report.rawCommitsPerSecond, report.depotSavesPerSecond, report.clientSavesPerSecond))
    ratios.append(
        Ratio(name: "ping depotd / raw echo", value: report.pingRatio, target: ">= 0.5", met: report.pingRatio >= 0.5))
    ratios.append(
        Ratio(
            name: "ping DepotConnection / raw echo", value: report.clientPingRatio,
            target: "(client library, no target)", met: true))
    ratios.append(
        Ratio(
            name: "save depotd / raw SQLite commit", value: report.saveRatio, target: ">= 0.3",
            met: report.saveRatio >= 0.3))
    ratios.append(
        Ratio(
            name: "save DepotConnection / raw SQLite commit", value: report.clientSaveRatio,
            target: "(client library, no target)", met: true))
    ratios.append(
        Ratio(
            name: "save, \(report.concurrentClients) clients / raw SQLite commit", value: report.concurrentSaveRatio,
            target: "(throughput under load)", met: true))
    sections["foundation"] = try encoder.encode(report)
}

if selected("predicates") {
    let report = try await PredicateBenchmark(rows: quick ? 100_000 : 1_000_000).run(depotd: depotd)
    print(
        String(
            format:
                "predicates: parse+compile of 10 clauses %.1f µs; CONTAINS[cd] over %d Items: depotd %.1f ms, raw SQL %.1f ms (%d matches)",
            report.parseCompileMicroseconds, report.rows, report.depotFetchMs, report.rawFetchMs, report.matches))
    ratios.append(
        Ratio(
            name: "CONTAINS[cd] fetch: raw SQL time / depotd time", value: report.ratio, target: ">= 0.8",
            met: report.ratio >= 0.8))
    ratios.append(
        Ratio(
            name: "parse+compile µs (10 clauses)", value: report.parseCompileMicroseconds, target: "(report)", met: true
        ))
    sections["predicates"] = try encoder.encode(report)
}

if selected("batch") {
    let report = try await BatchBenchmark(rows: quick ? 100_000 : 1_000_000).run(depotd: depotd)
    print(
        String(
            format:
                "batch: batchInsert of %d Items %.2f s vs raw prepared inserts %.2f s; streamed fetch %.2f s vs raw scan %.2f s; peak RSS %.0f MB after insert, %.0f MB after fetch",
            report.rows, report.batchInsertSeconds, report.rawInsertSeconds, report.streamedFetchSeconds,
            report.rawScanSeconds, report.peakRSSAfterInsertMB, report.peakRSSAfterFetchMB))
    ratios.append(
        Ratio(
            name: "batchInsert / raw prepared inserts", value: report.insertRatio, target: ">= 0.5",
            met: report.insertRatio >= 0.5))
    ratios.append(
        Ratio(
            name: "streamed fetch / raw scan", value: report.fetchRatio, target: ">= 0.3", met: report.fetchRatio >= 0.3
        ))
    ratios.append(
        Ratio(
            name: "peak daemon RSS MB (insert and fetch)",
            value: max(report.peakRSSAfterInsertMB, report.peakRSSAfterFetchMB), target: "< 200",
            met: max(report.peakRSSAfterInsertMB, report.peakRSSAfterFetchMB) < 200))
    sections["batch"] = try encoder.encode(report)
}

if selected("results") {
    let report = try await FetchedResultsBenchmark(rows: quick ? 50_000 : 1_000_000, samples: quick ? 50 : 300).run(
        depotd: depotd)
    print(
        String(
            format:
                "fetched results over %d rows: save→didChange p50 %.3f ms p99 %.3f ms; refetch-and-diff p50 %.1f ms p99 %.1f ms; %.1f bytes/row; subscribe %.2f s",
            report.rows, report.incrementalP50Ms, report.incrementalP99Ms, report.refetchP50Ms, report.refetchP99Ms,
            report.rssBytesPerRow, report.subscribeSeconds))
    ratios.append(
        Ratio(
            name: "refetch-and-diff p50 / incremental p50", value: report.speedupP50, target: ">= 100",
            met: report.speedupP50 >= 100))
    ratios.append(
        Ratio(
            name: "incremental p50 ms", value: report.incrementalP50Ms, target: "< 0.5",
            met: report.incrementalP50Ms < 0.5))
    ratios.append(
        Ratio(
            name: "incremental p99 ms", value: report.incrementalP99Ms, target: "< 2", met: report.incrementalP99Ms < 2)
    )
    ratios.append(
        Ratio(
            name: "daemon RSS bytes per subscribed row", value: report.rssBytesPerRow, target: "< 64",
            met: report.rssBytesPerRow < 64))
    sections["fetchedResults"] = try encoder.encode(report)
}

print("")
for ratio in ratios {
    let name = ratio.name.padding(toLength: 48, withPad: " ", startingAt: 0)
    print(name + String(format: "%12.3f", ratio.value) + "   target \(ratio.target)" + (ratio.met ? "" : "   MISSED"))
}

let stamp = ISO8601DateFormatter().string(from: Date())
var document =
    "{\n\"date\": \"\(stamp)\",\n\"quick\": \(quick),\n\"ratios\": "
    + String(decoding: try encoder.encode(ratios), as: UTF8.self)
for (name, data) in sections.sorted(by: { $0.key < $1.key }) {
    document += ",\n\"\(name)\": " + String(decoding: data, as: UTF8.self)
}
document += "\n}\n"
try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
try document.write(to: output.appendingPathComponent("latest.json"), atomically: true, encoding: .utf8)
try document.write(
    to: output.appendingPathComponent("\(stamp.replacingOccurrences(of: ":", with: "-")).json"), atomically: true,
    encoding: .utf8)
print("\nwritten to \(output.appendingPathComponent("latest.json").path)")
