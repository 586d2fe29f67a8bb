import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// A message over `--max-message-size` would make libzmq drop the connection
/// without an answer; the Swift client refuses to send it and says why at once,
/// and the connection goes on.
final class OversizedMessageTests: XCTestCase {
    func testClientRefusesAMessageOverTheDaemonsLimit() async throws {
        let daemon = try Daemon(arguments: ["--max-message-size", "100000"])
        let client = try await daemon.connect()
        defer { client.abort() }
        try await client.loadWorldCup()
        XCTAssertEqual(client.serverInfo.capabilities["maxMessageSize"], 100_000)
        let big = InsertedObject(
            entity: "Team",
            values: ["teamName": .string(String(repeating: "x", count: 200_000)), "qualifyingZone": "Z"])
        let started = ContinuousClock.now
        do {
            _ = try await client.call(StoreSave.self, .init(inserted: [big]))
            XCTFail("an oversized save was sent")
        } catch {
            XCTAssertTrue("\(error)".contains("over the daemon's maxMessageSize of 100000"), "\(error)")
            XCTAssertTrue("\(error)".contains("store/save"), "\(error)")
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(2), "refused at once, not timed out")
        // The connection is intact and nothing was written.
        let count = try await client.call(StoreCount.self, FetchRequest(entity: "Team")).count
        XCTAssertEqual(count, 32)
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }
}
