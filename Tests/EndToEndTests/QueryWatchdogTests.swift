import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// A read that runs on without producing a row past `--max-query-seconds` (a
/// SUBQUERY or predicate that would run away) is stopped with a clear -32602;
/// a long read whose rows keep coming is not; the reader is free afterwards.
final class QueryWatchdogTests: XCTestCase {
    func testRunawayReadsAreStoppedAndStreamingOnesAreNot() async throws {
        let daemon = try Daemon(arguments: ["--max-query-seconds", "0.05", "--max-fetch-objects", "1000000"])
        let client = try await daemon.connect()
        _ = try await client.call(ModelDefine.self, .init(entities: [WorldCup.item]))
        for chunk in 0..<4 {
            let objects: [[String: JSONValue]] = (0..<50_000).map { index in
                [
                    "name": .string("item \(chunk)-\(index) \(String(repeating: "é", count: index % 17))"),
                    "createdAt": "2026-01-01T00:00:00.000Z",
                ]
            }
            _ = try await client.call(BatchInsert.self, .init(entity: "Item", objects: objects))
        }
        // Every row goes through a Unicode fold and a sort before the first row comes: no row for long.
        let slow = FetchRequest(
            entity: "Item", predicate: "name CONTAINS[cd] 'E'", sort: [SortDescriptor(key: "name", ascending: false)],
            limit: 1)
        let error = await assertServerError(.invalidParams) { try await client.call(StoreFetch.self, slow) }
        XCTAssertTrue(error?.message.contains("without producing a row") ?? false, error?.message ?? "")
        XCTAssertEqual(error?.data?["field"], "predicate")

        // 200,000 rows in id order: rows keep coming, however long it takes in all.
        let all = try await client.call(StoreFetch.self, FetchRequest(entity: "Item", resultType: .ids))
        XCTAssertEqual(all.ids?.count, 200_000)
        // The reader that was stopped serves again.
        let one = try await client.call(StoreGet.self, .init(ids: ["Item/1"]))
        XCTAssertEqual(one.objects.first?["id"], "Item/1")
    }
}
