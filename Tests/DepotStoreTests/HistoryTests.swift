import DepotProtocol
import GRDB
import XCTest

@testable import DepotStore

final class HistoryTests: XCTestCase {
    /// Random change sets survive the compact form, order included.
    func testCompactFormRoundTrips() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            var set = EntityChangeSet(entity: "Item")
            var next = Int64.random(in: 1...1_000, using: &generator)
            for _ in 0..<Int.random(in: 0..<50, using: &generator) {
                next += Bool.random(using: &generator) ? 1 : Int64.random(in: 2...9, using: &generator)
                set.inserted.append(next)
            }
            for row in (0..<Int.random(in: 0..<30, using: &generator)).map({ _ in Int64.random(in: 1...5_000) }) {
                guard !set.updated.contains(where: { $0.row == row }) else { continue }
                set.updated.append((row, Set(["a", "b", "c"].filter { _ in Bool.random() }.prefix(2))))
            }
            set.deleted = (0..<Int.random(in: 0..<20, using: &generator)).map { Int64($0 * 3 + 7) }
            let text = String(decoding: HistoryCoding.encode(["Item": set]), as: UTF8.self)
            let decoded = try XCTUnwrap(HistoryCoding.decode(text)["Item"])
            XCTAssertEqual(decoded.inserted, set.inserted)
            XCTAssertEqual(decoded.deleted, set.deleted)
            XCTAssertEqual(
                Dictionary(uniqueKeysWithValues: decoded.updated.map { ($0.row, $0.keys) }),
                Dictionary(uniqueKeysWithValues: set.updated.map { ($0.row, $0.keys) }))
        }
    }

    /// A consecutive batch is one run; rows written in the old wire form still read.
    func testBatchesAreRunsAndOldRowsStillRead() throws {
        var batch = EntityChangeSet(entity: "Item")
        batch.inserted = Array(1...2_000)
        let text = String(decoding: HistoryCoding.encode(["Item": batch]), as: UTF8.self)
        XCTAssertEqual(text, #"{"Item":{"i":[[1,2000]]}}"#)
        let old = #"{"Team":{"inserted":["Team/3"],"updated":[{"id":"Team/1","keys":["wins"]}],"deleted":["Team/2"]}}"#
        let decoded = try XCTUnwrap(HistoryCoding.decode(old)["Team"])
        XCTAssertEqual(decoded.inserted, [3])
        XCTAssertEqual(decoded.deleted, [2])
        XCTAssertEqual(decoded.updated.first?.row, 1)
        XCTAssertEqual(decoded.updated.first?.keys, ["wins"])
    }

    /// `512MB`, `100000,2KB` and friends parse; nonsense does not.
    func testRetentionParsing() {
        XCTAssertEqual(HistoryRetention(parsing: "512MB"), .size(512_000_000))
        XCTAssertEqual(HistoryRetention(parsing: "2kb"), .size(2_000))
        XCTAssertEqual(HistoryRetention(parsing: "100000,2KB"), .all([.count(100_000), .size(2_000)]))
        XCTAssertEqual(HistoryRetention(parsing: "7d"), .age(7 * 86_400))
        for bad in ["", "MB", "-1MB", "12XB", "100,forever", ",", "0"] {
            XCTAssertNil(HistoryRetention(parsing: bad), bad)
        }
    }

    /// A size bound keeps history near the bound however many transactions come.
    func testSizeBoundPrunes() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-history-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(
            path: directory.appendingPathComponent("depot.sqlite").path, historyRetention: .size(20_000))
        _ = try store.defineModel(testModel)
        for index in 0..<1_000 {
            _ = try store.insertTeam("Team \(index)", zone: "Zone \(index % 7)")
        }
        let bytes = try store.historyBytes()
        XCTAssertLessThanOrEqual(bytes, 20_000 + 64 * 200, "pruned every 64 commits")
        XCTAssertGreaterThan(bytes, 10_000)
        let history = try store.history(since: 0, limit: 10_000)
        XCTAssertEqual(history.latest, 1_000)
        XCTAssertGreaterThan(history.oldest, 500, "old transactions were pruned")
        XCTAssertEqual(history.transactions.last?.changes["Team"]?.inserted.count, 1)
    }
}

extension HistoryTests {
    /// Evenly spaced rows are one strided run; uneven ones stay exact.
    func testStridedRuns() throws {
        var set = EntityChangeSet(entity: "Item")
        set.deleted = Array(stride(from: Int64(2), through: 2_000, by: 2)) + [2_003, 2_004, 2_010, 2_020]
        let text = String(decoding: HistoryCoding.encode(["Item": set]), as: UTF8.self)
        XCTAssertEqual(text, #"{"Item":{"d":[[2,2000,2],[2003,2004],2010,2020]}}"#)
        XCTAssertEqual(try HistoryCoding.decode(text)["Item"]?.deleted, set.deleted)
    }
}
