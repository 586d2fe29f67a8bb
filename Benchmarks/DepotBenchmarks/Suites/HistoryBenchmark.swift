import DepotProtocol
import Foundation
import GRDBSQLite

/// Bytes of persistent history per transaction, by transaction shape, in the
/// compact form the daemon stores against the wire form it stored before
/// (`{"inserted": ["Item/1", …]}`), both measured on the same transactions.
struct HistoryBenchmark: Benchmark {
    static let name = "history"
    static let summary =
        "persistent history bytes per transaction (single saves, 2,000-row batches): compact form vs the former wire form"

    func run(_ suite: SuiteRun) async throws {
        let daemon = try suite.startDaemon(.ipc, label: "history")
        defer { daemon.stop() }
        let rpc = try RawRPCClient(endpoint: daemon.endpoint)
        _ = try rpc.initialize()
        _ = try rpc.call("model/define", params: BenchmarkModel.defineParams)
        let batchSize = 2_000
        let batches = suite.options.quick ? 5 : 25
        let saves = suite.options.quick ? 200 : 1_000
        let database = daemon.dataDirectory.appendingPathComponent("depot.sqlite").path

        var shapes: [(name: String, first: Int64, last: Int64)] = []
        func shape(_ name: String, _ body: () throws -> Void) throws {
            let first = try rpc.call("store/history", params: #"{"since":0,"limit":1}"#)["latest"]?.intValue ?? 0
            try body()
            let last = try rpc.call("store/history", params: #"{"since":0,"limit":1}"#)["latest"]?.intValue ?? 0
            shapes.append((name, first + 1, last))
        }
        try shape("save-insert") {
            for index in 0..<saves { _ = try rpc.call("store/save", params: BenchmarkModel.insertItemParams(index)) }
        }
        try shape("save-update") {
            for index in 0..<saves {
                _ = try rpc.call(
                    "store/save", params: #"{"updated":[{"id":"Item/\#(index % saves + 1)","values":{"done":true}}]}"#)
            }
        }
        try shape("batch-insert-2000") {
            for batch in 0..<batches {
                let objects = (0..<batchSize).map { index in
                    #"{"name":"batch \#(batch)-\#(index)","createdAt":"\#(BenchmarkModel.itemDate.wire)","done":\#(index % 2 == 0)}"#
                }
                _ = try rpc.call(
                    "store/batchInsert", params: #"{"entity":"Item","objects":[\#(objects.joined(separator: ","))]}"#)
            }
        }
        try shape("batch-update-half") {
            for batch in 0..<batches {
                _ = try rpc.call(
                    "store/batchUpdate",
                    params:
                        #"{"entity":"Item","predicate":"name BEGINSWITH %@ AND done == YES","arguments":["batch \#(batch)-"],"values":{"done":false}}"#
                )
            }
        }

        // Stored bytes by the daemon's own running total, per shape; the former form re-encoded from store/history.
        let raw = try RawSQLite(path: database)
        for shape in shapes where shape.last >= shape.first {
            var stored: Int64 = 0
            let statement = try raw.prepare(
                "SELECT SUM(length(changes) + 40) FROM depot_transaction WHERE id BETWEEN \(shape.first) AND \(shape.last)"
            )
            try statement.run { handle in stored = sqlite3_column_int64(handle, 0) }
            var former = 0
            var since = shape.first - 1
            while since < shape.last {
                let page = try rpc.call("store/history", params: #"{"since":\#(since),"limit":1000}"#)
                let records = try JSONCoding.decode([TransactionRecord].self, from: page["transactions"] ?? .array([]))
                for record in records where record.transaction <= shape.last {
                    former += try JSONCoding.encodeBytes(record.changes).count + 40
                }
                guard let last = records.last?.transaction, last > since else { break }
                since = last
            }
            let count = Double(shape.last - shape.first + 1)
            let perTransaction = Double(stored) / count
            suite.check(
                "history.\(shape.name).bytes", perTransaction, target: nil, .atMost,
                of: "stored bytes / transaction")
            suite.check(
                "history.\(shape.name).vs-wire", perTransaction / (Double(former) / count), target: nil, .atMost,
                of: "compact bytes", over: "wire-form bytes")
        }
        let fileBytes = (try? FileManager.default.attributesOfItem(atPath: database)[.size] as? Int) ?? 0
        suite.note("storeFileBytes", .int(Int64(fileBytes)))
        suite.note("transactions", .int(shapes.last.map { $0.last } ?? 0))
    }
}
