import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// A client process killed (SIGKILL) while a save waits in its persistent store (DESIGN.md §9 and
/// §6): the next process on the same file finds the save and replays it exactly once.
final class ClientKilledWhileOfflineTests: XCTestCase {
    /// `Examples/Offline` (`OfflineExample --increment Brazil`) is the child: it opens an
    /// `ObjectContext` on the file, saves with the daemon stopped (queued), and waits for the
    /// daemon; it is killed there. A fresh context on the file, the daemon started, replays the
    /// save: Brazil has one more win, and history holds that save once.
    func testASaveQueuedByAClientKilledWhileOfflineIsReplayedExactlyOnce() async throws {
        let child = Executables.offlineExample
        guard FileManager.default.isExecutableFile(atPath: child.path) else {
            throw XCTSkip("no OfflineExample at \(child.path) (swift build builds it)")
        }
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-killed-\(UUID())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let file = scratch.appendingPathComponent("replica.sqlite")

        // The teams (and the model, for offline predicates) in the file, then the daemon stopped.
        let brazilID: String
        let winsBefore: Int
        let loadTransactions: Int
        do {
            let connection = try await DepotConnection.connect(to: endpoint, timeout: .seconds(5))
            let ids = try await connection.loadWorldCup()
            brazilID = try XCTUnwrap(ids["Brazil"])
            let context = try ObjectContext(connection: connection, persistentStore: file)
            let teams = try await context.fetch(FetchRequest(entity: "Team"))
            XCTAssertEqual(teams.count, 32)
            winsBefore = try XCTUnwrap(teams.first { $0.id == brazilID }?.int("wins"))
            loadTransactions = try await connection.call(StoreHistory.self, .init(since: 0, limit: 10_000))
                .transactions.count
            await connection.close()
        }
        XCTAssertEqual(first.stop(), 0)

        // The child queues the save, says so, and waits for the daemon: killed there.
        let output = scratch.appendingPathComponent("stdout")
        let errors = scratch.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
        let process = Process()
        process.executableURL = child
        process.arguments = ["--connect", endpoint, "--store", file.path, "--increment", "Brazil", "--wait", "600"]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errors)
        try process.run()
        let deadline = ContinuousClock.now + .seconds(60)
        var printed = ""
        while process.isRunning, ContinuousClock.now < deadline, !printed.contains("queued in") {
            try await Task.sleep(for: .milliseconds(50))
            printed = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        }
        let stillRunning = process.isRunning
        if stillRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let stderr = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
        XCTAssertTrue(printed.contains("Brazil: \(winsBefore + 1) wins, queued in"), "child said: \(printed) \(stderr)")
        XCTAssertTrue(stillRunning, "the child was waiting for the daemon when killed")
        XCTAssertEqual(process.terminationReason, .uncaughtSignal)
        XCTAssertEqual(process.terminationStatus, SIGKILL)

        // A fresh process, in effect: the file holds the save; the daemon starts; it replays once.
        let connection = try DepotConnection.open(to: endpoint, timeout: .seconds(5))
        let context = try ObjectContext(connection: connection, persistentStore: file)
        let pending = try context.pendingSaves()
        XCTAssertEqual(pending.count, 1, "the killed client's save is in the file")
        XCTAssertEqual(pending.first?.updated.map(\.id), [brazilID])
        XCTAssertNotNil(pending.first?.saveId)

        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let replayDeadline = ContinuousClock.now + .seconds(30)
        while try !context.pendingSaves().isEmpty, ContinuousClock.now < replayDeadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertEqual(try context.pendingSaves().count, 0, "replayed once the daemon was back")
        XCTAssertNil(context.persistentStoreError)
        let failures = await ClientSupport.first(context.failedSaves(), timeout: .milliseconds(300))
        XCTAssertNil(failures, "the replay was not refused")

        let other = try await second.connect(name: "checker")
        let brazil = try await other.call(StoreGet.self, .init(ids: [brazilID])).objects.first
        XCTAssertEqual(brazil?["wins"]?.intValue, Int64(winsBefore + 1))
        let history = try await other.call(StoreHistory.self, .init(since: 0, limit: 10_000))
        XCTAssertEqual(history.transactions.count, loadTransactions + 1, "the queued save, applied once")
        let saves = history.transactions.filter { record in
            record.changes.values.contains { $0.updated.contains { $0.id == brazilID } }
        }
        XCTAssertEqual(saves.count, 1, "one transaction updated Brazil")

        // The same save sent again (a replay whose answer was lost) is answered, not applied again.
        let again = try await other.call(StoreSave.self, try XCTUnwrap(pending.first))
        let historyAfter = try await other.call(StoreHistory.self, .init(since: 0, limit: 10_000))
        XCTAssertEqual(historyAfter.transactions.count, loadTransactions + 1)
        XCTAssertEqual(again.transaction, saves.first?.transaction)
        await connection.close()
        await other.close()
    }

    /// Issue 36: after a later process replays a killed one's queue, the file holds exactly what
    /// the store kept. The child queues, in one save, a win for Brazil and a new team; a fresh
    /// context replays it; then, the daemon stopped, offline reads of the file equal the store's
    /// objects: the new team under its permanent id only (no temporary-id twin), Brazil with the
    /// store's version and wins. When the store refuses the save (the new team's name taken, under
    /// the `error` merge policy: -32011), the file is rolled back to the store's state: no new
    /// team, Brazil as the store has it.
    func testAfterAReplayByALaterProcessTheFileHoldsWhatTheStoreKept() async throws {
        try await replayAndCompare(addTeam: "Atlantis", refused: false)
    }

    func testAfterARefusedReplayByALaterProcessTheFileHoldsWhatTheStoreKept() async throws {
        try await replayAndCompare(addTeam: "Japan", refused: true)
    }

    private func replayAndCompare(addTeam: String, refused: Bool) async throws {
        let child = Executables.offlineExample
        guard FileManager.default.isExecutableFile(atPath: child.path) else {
            throw XCTSkip("no OfflineExample at \(child.path) (swift build builds it)")
        }
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replayed-\(UUID())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let file = scratch.appendingPathComponent("replica.sqlite")
        do {
            let connection = try await DepotConnection.connect(to: endpoint, timeout: .seconds(5))
            try await connection.loadWorldCup()
            let context = try ObjectContext(connection: connection, persistentStore: file)
            let value1 = try await context.fetch(FetchRequest(entity: "Team")).count
            XCTAssertEqual(value1, 32)
            await connection.close()
        }
        XCTAssertEqual(first.stop(), 0)

        let output = scratch.appendingPathComponent("stdout")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let process = Process()
        process.executableURL = child
        process.arguments = [
            "--connect", endpoint, "--store", file.path, "--increment", "Brazil", "--add-team", addTeam,
            "--merge-policy",
            refused ? "error" : "objectTrump", "--wait", "600",
        ]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = ContinuousClock.now + .seconds(60)
        var printed = ""
        while process.isRunning, ContinuousClock.now < deadline, !printed.contains("queued in") {
            try await Task.sleep(for: .milliseconds(50))
            printed = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        XCTAssertTrue(printed.contains("queued in"), "child said: \(printed)")

        // A fresh process replays the file's queue.
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer { second.removeData() }
        do {
            let connection = try DepotConnection.open(to: endpoint, timeout: .seconds(5))
            let context = try ObjectContext(connection: connection, persistentStore: file)
            let failures = context.failedSaves()
            let replayDeadline = ContinuousClock.now + .seconds(30)
            while try !context.pendingSaves().isEmpty, ContinuousClock.now < replayDeadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            XCTAssertEqual(try context.pendingSaves().count, 0, "replayed")
            let failure = await ClientSupport.first(failures, timeout: .seconds(2))
            XCTAssertEqual(failure != nil, refused, "\(String(describing: failure))")
            // The file is written after the replay's last answer: wait for the context to settle.
            try await Task.sleep(for: .milliseconds(500))
            XCTAssertNil(context.persistentStoreError)
            await connection.close()
        }
        let checker = try await second.connect(name: "checker")
        let kept = try await checker.call(StoreFetch.self, FetchRequest(entity: "Team")).objects ?? []
        await checker.close()
        XCTAssertEqual(second.stop(), 0)
        XCTAssertEqual(kept.count, refused ? 32 : 33)

        // Offline reads of the file equal what the store kept: ids, versions and values.
        let offline = try DepotConnection.open(to: endpoint, timeout: .seconds(5))
        let context = try ObjectContext(connection: offline, persistentStore: file)
        let read = try await context.fetch(FetchRequest(entity: "Team"))
        func summary(_ id: String?, _ version: Int64?, _ values: [String: JSONValue]) -> String {
            "\(id ?? "?") v\(version.map(String.init) ?? "?") \(values["teamName"]?.stringValue ?? "?") wins \(values["wins"]?.intValue ?? -1)"
        }
        let fromStore = kept.map { object in
            summary(
                object["id"]?.stringValue, object["version"]?.intValue,
                object.objectValue?.filter { !["id", "entity", "version"].contains($0.key) } ?? [:])
        }.sorted()
        let fromFile = read.map { summary($0.id, $0.version, $0.values) }.sorted()
        XCTAssertEqual(fromFile, fromStore)
        XCTAssertFalse(read.contains { $0.id.hasPrefix("temp-") }, "no object under a temporary id")
        await offline.close()
    }
}
