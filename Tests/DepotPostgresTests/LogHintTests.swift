import DepotProtocol
import DepotStore
import Foundation
import XCTest

@testable import DepotPostgres

/// The NOTIFY payload that carries small entries (``LogHint``) and the follower's buffer of them
/// (``HintedEntries``), without a server.
final class LogHintTests: XCTestCase {
    func testAPayloadCarriesAGroupsEntriesAndReadsBackTheSame() throws {
        let group = [
            dataEntry(7, transaction: 3, changeset: [], continued: true, checksum: nil),
            dataEntry(8, transaction: 4, changeset: [1, 2, 3, 255, 0, 42], checksum: -5),
        ]
        let payload = LogHint.payload(for: group, changes: group.map(changes), node: "node a")
        XCTAssertEqual(LogHint.header(of: payload)?.head, 8)
        XCTAssertEqual(LogHint.header(of: payload)?.node, "node a")
        XCTAssertEqual(LogHint.entries(in: payload), group)
        let model = ReplicatedEntry(
            number: 9, author: "a b", timestamp: 12.5,
            content: .model(
                entities: [
                    EntityDescription(name: "Item", attributes: [AttributeDescription(name: "n", type: .string)])
                ],
                removing: ["Old"]), checksum: 77)
        XCTAssertEqual(
            LogHint.entries(in: LogHint.payload(for: [model], changes: [changes(model)], node: "b")), [model])
    }

    func testEntriesThatDoNotFitLeaveTheHeadOnly() throws {
        let big = dataEntry(5, transaction: 5, changeset: Array(repeating: 9, count: 6_000), checksum: 1)
        let payload = LogHint.payload(for: [big], changes: [changes(big)], node: "a")
        XCTAssertEqual(payload, "5 a")
        XCTAssertEqual(LogHint.header(of: payload)?.head, 5)
        XCTAssertEqual(LogHint.entries(in: payload), [])
        // Just under the limit, it is carried, and PostgreSQL's limit is kept.
        let fitting = dataEntry(6, transaction: 6, changeset: Array(repeating: 9, count: 5_000), checksum: 1)
        let carried = LogHint.payload(for: [fitting], changes: [changes(fitting)], node: "a")
        XCTAssertLessThanOrEqual(carried.utf8.count, LogHint.maximumPayload)
        XCTAssertEqual(LogHint.entries(in: carried), [fitting])
    }

    func testAPayloadThatIsNotOursCarriesNothing() {
        XCTAssertNil(LogHint.header(of: "hello"))
        XCTAssertEqual(LogHint.entries(in: "3\n3 x - {}"), [])
        XCTAssertEqual(LogHint.entries(in: "3\n3 - %%% {}"), [])
        XCTAssertEqual(LogHint.entries(in: "3\n3 - - {\"kind\": \"data\"}"), [])
        // A payload of an earlier version: the head alone, no node.
        XCTAssertEqual(LogHint.header(of: "42")?.head, 42)
        XCTAssertEqual(LogHint.header(of: "42")?.node, "")
        XCTAssertEqual(LogHint.entries(in: "42"), [])
    }

    func testTheBufferAnswersOnlyWithARunRightAfterThePositionThatReachesEverythingHeard() {
        let hinted = HintedEntries()
        let entries = (1...6).map { dataEntry(Int64($0), transaction: Int64($0), changeset: [1], checksum: nil) }
        XCTAssertNil(hinted.take(after: 0, limit: 10), "nothing heard")
        hinted.hear(head: 2, entries: Array(entries[0...1]), after: 0)
        // Heard 3 without its entry (too big to carry): the log must be read.
        hinted.hear(head: 3, entries: [], after: 0)
        XCTAssertNil(hinted.take(after: 0, limit: 10))
        hinted.reset()
        hinted.hear(head: 2, entries: Array(entries[0...1]), after: 0)
        XCTAssertEqual(hinted.take(after: 1, limit: 10), [entries[1]], "entry 1 is applied already")
        XCTAssertNil(hinted.take(after: 2, limit: 10), "taken entries are gone")
        // A gap before what was heard: the log.
        hinted.hear(head: 4, entries: [entries[3]], after: 2)
        XCTAssertNil(hinted.take(after: 2, limit: 10))
        // The poll saw a head beyond the run: the log.
        hinted.hear(head: 5, entries: [entries[4]], after: 3)
        hinted.sawHead(6)
        XCTAssertNil(hinted.take(after: 4, limit: 10))
        hinted.hear(head: 6, entries: [entries[5]], after: 4)
        XCTAssertEqual(hinted.take(after: 4, limit: 1), [entries[4]], "a run cut at the limit")
        XCTAssertEqual(hinted.take(after: 5, limit: 10), [entries[5]])
        // A group that ends halfway: the log.
        hinted.hear(
            head: 7, entries: [dataEntry(7, transaction: 7, changeset: [], continued: true, checksum: nil)], after: 6)
        XCTAssertNil(hinted.take(after: 6, limit: 10))
    }

    func testTheBufferKeepsABoundedNumberOfEntries() {
        let hinted = HintedEntries()
        for number in Int64(1)...Int64(HintedEntries.capacity + 10) {
            hinted.hear(
                head: number, entries: [dataEntry(number, transaction: number, changeset: [1], checksum: nil)], after: 0
            )
        }
        // The oldest were dropped on overflow: the run from 0 no longer reaches the head.
        XCTAssertNil(hinted.take(after: 0, limit: .max))
    }

    // MARK: Helpers

    private func dataEntry(
        _ number: Int64, transaction: Int64, changeset: [UInt8], continued: Bool = false, checksum: Int64?
    ) -> ReplicatedEntry {
        ReplicatedEntry(
            number: number, author: "writer \(number)", timestamp: 1_700_000_000.25 + Double(number),
            content: .data(
                transaction: transaction, changes: #"{"inserted":{"Item":[1]},"note":"a\nb"}"#, changeset: changeset,
                continued: continued), checksum: checksum)
    }

    private func changes(_ entry: ReplicatedEntry) -> String {
        String(decoding: JSONWriter.encode(PostgresReplication.encode(entry)), as: UTF8.self)
    }
}
