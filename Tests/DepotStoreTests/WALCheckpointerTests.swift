import DepotProtocol
import Foundation
import GRDB
import XCTest

@testable import DepotStore

/// The writer no longer checkpoints the WAL itself: a checkpoint runs in the
/// background once a commit leaves the WAL past the threshold, so the WAL is
/// written back and reused, never left to grow.
final class WALCheckpointerTests: XCTestCase {
    private func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    /// Commits `rows` blobs of 16 KiB: four pages each, past the threshold at 250 rows.
    private func commitBlobs(_ store: Store, rows: Int, from start: Int) throws {
        try store.pool.write { db in
            for row in start..<(start + rows) {
                try db.execute(sql: "INSERT INTO blob (id, bytes) VALUES (?, zeroblob(16384))", arguments: [row])
            }
        }
    }

    func testABigCommitIsWrittenBackInTheBackgroundAndTheWALIsReused() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("depot.sqlite").path
        try store.pool.write { db in try db.execute(sql: "CREATE TABLE blob (id INTEGER PRIMARY KEY, bytes BLOB)") }
        let before = fileSize(path)
        var walAfterFirst = 0
        for round in 0..<5 {
            try commitBlobs(store, rows: 400, from: round * 400)
            // No checkpoint was asked for: the one the commit scheduled writes the pages back.
            let checkpointer = try XCTUnwrap(store.checkpointer)
            checkpointer.wait()
            XCTAssertNil(checkpointer.lastFailure)
            let written = before + (round + 1) * 400 * 16384
            XCTAssertGreaterThanOrEqual(fileSize(path), written, "round \(round): the WAL was not written back")
            if round == 0 { walAfterFirst = fileSize(path + "-wal") }
        }
        // Written back, the WAL started over with each commit instead of growing.
        XCTAssertGreaterThan(walAfterFirst, 400 * 16384)
        XCTAssertLessThan(fileSize(path + "-wal"), walAfterFirst * 3 / 2, "the WAL kept growing")
        XCTAssertEqual(try store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM blob") }, 2_000)
    }
}
