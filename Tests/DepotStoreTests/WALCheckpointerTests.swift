import DepotProtocol
import Foundation
import GRDB
import XCTest

@testable import DepotStore

/// The WAL is copied back into the file off the writer's path (``WALCheckpointer``), and under
/// writes without a pause it still stays bounded (the writer checkpoints past the limit).
final class WALCheckpointerTests: XCTestCase {
    func testTheLogIsCopiedBackOffTheWriterAndStartsOver() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let log = directory.appendingPathComponent("depot.sqlite-wal").path
        func logBytes() throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: log)[.size] as? NSNumber)?.intValue ?? 0
        }
        let page = 4096
        // Each transaction writes about 100 pages (100 blobs of 4 KB) through the store's writer:
        // 300 of them write about 30,000 pages, 120 MB of log were it never copied back.
        try store.pool.write { try $0.execute(sql: "CREATE TABLE scratch (data BLOB)") }
        var largest = 0
        for _ in 0..<300 {
            try store.pool.write { db in
                for _ in 0..<100 { try db.execute(sql: "INSERT INTO scratch VALUES (zeroblob(4000))") }
            }
            largest = max(largest, try logBytes())
        }
        let figures = store.checkpointer.figures
        XCTAssertGreaterThan(figures.runs, 0, "no checkpoint ran")
        // At most the writer's own limit, plus what one save writes past it.
        XCTAssertLessThan(
            largest, (Int(WALCheckpointer.limit) + 400) * page,
            "the log grew to \(largest) bytes (\(figures.runs) checkpoints, \(figures.byWriter) by the writer, \(figures.partial) partial)"
        )
        // Everything written is there.
        let count = try store.pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM scratch") }
        XCTAssertEqual(count, 300 * 100)
    }
}
