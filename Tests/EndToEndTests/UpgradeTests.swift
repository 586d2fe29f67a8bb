import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Data directories made by earlier builds (DESIGN.md §12 "Upgrades"), kept in
/// `Tests/Fixtures/upgrade/`: every later format must open them.
///
/// - `format-1/`: a data directory of the release before formats were recorded (the World Cup
///   teams, Japan's wins set to 7 in a second transaction, a save with saveId `fixture-save`).
/// - `format-99/`: the same store claiming a format newer than any build reads.
final class UpgradeTests: XCTestCase {
    private var scratch: URL!

    override func setUpWithError() throws {
        try XCTSkipIf(
            !(ProcessInfo.processInfo.environment["DEPOT_TEST_STORE"] ?? "").isEmpty,
            "the fixtures are embedded stores")
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-upgrade-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    /// A copy of fixture `name` (the daemon writes to its data directory).
    private func dataDirectory(copying name: String) throws -> URL {
        let target = scratch.appendingPathComponent(name)
        try FileManager.default.copyItem(
            at: Fixtures.directory.appendingPathComponent("upgrade/\(name)"), to: target)
        return target
    }

    func testAFormatOneDataDirectoryIsUpgradedOnceAndServesItsData() async throws {
        let directory = try dataDirectory(copying: "format-1")
        let daemon = try Daemon(dataDirectory: directory, arguments: ["--log-level", "notice"])
        let connection = try await daemon.connect()
        let model = try await connection.call(ModelGet.self, Empty())
        XCTAssertEqual(model.entities.map(\.name).sorted(), ["Item", "Team"])
        let teams =
            try await connection.call(
                StoreFetch.self, FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")])
            ).objects ?? []
        XCTAssertEqual(teams.count, 32)
        XCTAssertEqual(teams.first { $0["teamName"] == "Japan" }?["wins"], 7)
        let history = try await connection.call(StoreHistory.self, .init(since: 0, limit: 100)).transactions
        XCTAssertEqual(history.count, 2)
        // The save id came along: the same save is answered, not applied again.
        let japan = try XCTUnwrap(teams.first { $0["teamName"] == "Japan" }?["id"]?.stringValue)
        let replay = try await connection.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["wins": 7])], saveId: "fixture-save"))
        XCTAssertEqual(replay.transaction, history.last?.transaction)
        // And it takes new writes.
        let save = try await connection.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["wins": 8])]))
        XCTAssertEqual(save.transaction, (history.last?.transaction ?? 0) + 1)
        await connection.close()
        XCTAssertEqual(daemon.stop(), 0)
        let log = daemon.log
        XCTAssertTrue(log.contains("from data format 1 to 2"), log)

        // Recorded: the next start finds the current format and says nothing.
        let again = try Daemon(dataDirectory: directory, arguments: ["--log-level", "notice"])
        let reader = try await again.connect()
        let wins = try await reader.call(StoreGet.self, .init(ids: [japan])).objects.first?["wins"]
        XCTAssertEqual(wins, 8)
        await reader.close()
        XCTAssertEqual(again.stop(), 0)
        XCTAssertFalse(again.log.contains("data format"), again.log)
    }

    func testANewerFormatIsRefusedAtStartUpBeforeBinding() throws {
        let directory = try dataDirectory(copying: "format-99")
        let before = try Data(contentsOf: directory.appendingPathComponent("depot.sqlite"))
        let probe = try Daemon(dataDirectory: scratch.appendingPathComponent("probe"))
        let port = Int(probe.endpoint.split(separator: ":").last!)!
        probe.stop()
        let result = try ProcessOutcome.run(
            Executables.depotd, ["--data-dir", directory.path, "--listen", "tcp://127.0.0.1:\(port)"],
            timeout: .seconds(15))
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("data format 99"), result.errors)
        XCTAssertTrue(result.errors.contains("newer than format 2"), result.errors)
        XCTAssertTrue(result.errors.contains(directory.path), result.errors)
        XCTAssertFalse(result.output.contains("listening"), result.output)
        // Nothing was written to it.
        let after = try Data(contentsOf: directory.appendingPathComponent("depot.sqlite"))
        XCTAssertEqual(before, after)
    }
}
