import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import Synchronization
import XCTest

/// `server/backup` and `depot backup` against a real daemon (DESIGN.md §12 "Backup"): a
/// consistent copy of the store as of one transaction, written while writers save and a
/// subscriber listens, that a daemon then serves; a daemon killed mid-backup leaves its
/// store whole and no copy.
final class BackupTests: XCTestCase {
    private var scratch: URL!

    override func setUpWithError() throws {
        // A PostgreSQL store refuses backups (testClusterRefusesBackup): these need the embedded store.
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-backup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: scratch)
    }

    private var onPostgres: Bool { !(ProcessInfo.processInfo.environment["DEPOT_TEST_STORE"] ?? "").isEmpty }

    /// Items (a name and a number) and one counter per writer.
    private static let model = [
        EntityDescription(
            name: "Item",
            attributes: [
                AttributeDescription(name: "name", type: .string), AttributeDescription(name: "n", type: .integer),
            ]),
        EntityDescription(
            name: "Counter",
            attributes: [
                AttributeDescription(name: "writer", type: .integer),
                AttributeDescription(name: "count", type: .integer),
            ]),
    ]

    /// Inserts `count` items by batches.
    private func loadItems(_ count: Int, into connection: DepotConnection) async throws {
        var start = 0
        while start < count {
            let end = min(count, start + 10_000)
            let objects: [[String: JSONValue]] = (start..<end).map {
                ["name": .string("item \($0) " + String(repeating: "x", count: 40)), "n": .int(Int64($0))]
            }
            _ = try await connection.call(
                BatchInsert.self, .init(entity: "Item", objects: objects), timeout: .seconds(300))
            start = end
        }
    }

    /// The work-done `$/progress` values sent for `token`, as they come.
    private final class ProgressLog: Sendable {
        private let storage = Locked<[WorkDoneProgress]>([])
        private let task: Task<Void, Never>

        init(_ connection: DepotConnection, token: JSONValue) {
            let notifications = connection.notifications()
            let storage = storage
            task = Task {
                for await notification in notifications {
                    guard let params = notification.decode(ProgressNotification.self), params.token == token,
                        let value = try? JSONCoding.decode(WorkDoneProgress.self, from: params.value)
                    else { continue }
                    storage.lock.withLock { $0.append(value) }
                }
            }
        }

        /// What came so far.
        var values: [WorkDoneProgress] { storage.lock.withLock { $0 } }

        deinit { task.cancel() }
    }

    /// A value behind a lock, shared by reference with tasks.
    private final class Locked<Value: Sendable>: Sendable {
        let lock: Mutex<Value>
        init(_ value: Value) { lock = Mutex(value) }
    }

    func testBackupWhileWritersSaveIsTheStoreAsOfItsTransactionAndADaemonServesIt() async throws {
        try XCTSkipIf(onPostgres, "a PostgreSQL store is backed up with pg_dump")
        let daemon = try Daemon()
        defer { daemon.removeData() }
        let admin = try await daemon.connect(name: "admin")
        _ = try await admin.call(ModelDefine.self, .init(entities: Self.model))
        // Issue 36's size: 1M rows under 4 writers (DEPOT_BACKUP_TEST_ROWS for a quicker local run).
        let rows = Int(ProcessInfo.processInfo.environment["DEPOT_BACKUP_TEST_ROWS"] ?? "") ?? 1_000_000
        try await loadItems(rows, into: admin)
        let writerCount = 4
        let counters = try await admin.call(
            StoreSave.self,
            .init(
                inserted: (0..<writerCount).map {
                    InsertedObject(
                        entity: "Counter", tempId: "w\($0)", values: ["writer": .int(Int64($0)), "count": 0])
                })
        ).ids
        let sentinel = StoreSave.Parameters(
            inserted: [InsertedObject(entity: "Item", values: ["name": "sentinel", "n": -1])], saveId: "before-backup")
        let sentinelSave = try await admin.call(StoreSave.self, sentinel)

        // A live subscriber on the counters.
        let subscriber = try await daemon.connect(name: "subscriber")
        let subscriberNotifications = subscriber.notifications()
        let subscribed = try await subscriber.call(
            ResultsSubscribe.self,
            .init(request: FetchRequest(entity: "Counter", sort: [SortDescriptor(key: "writer")])))
        let seen = Task {
            var last = subscribed.transaction
            var changes = 0
            for await notification in subscriberNotifications {
                if let change = notification.decode(ResultsDidChange.self) {
                    last = max(last, change.transaction)
                    changes += 1
                    if changes >= writerCount * 1000 { break }
                }
                if Task.isCancelled { break }
            }
            return (last, changes)
        }

        // Writers: each save inserts an item and sets the writer's counter to the save's number.
        let started = Locked(0)
        let stop = Locked(false)
        let writers = (0..<writerCount).map { writer in
            Task { () throws -> [(count: Int64, transaction: Int64)] in
                let connection = try await daemon.connect(name: "writer \(writer)")
                var saves: [(Int64, Int64)] = []
                var count: Int64 = 0
                while !stop.lock.withLock({ $0 }) || count < 30 {
                    count += 1
                    let result = try await connection.call(
                        StoreSave.self,
                        .init(
                            inserted: [
                                InsertedObject(
                                    entity: "Item",
                                    values: ["name": .string("writer \(writer) save \(count)"), "n": .int(count)])
                            ],
                            updated: [UpdatedObject(id: counters["w\(writer)"]!, values: ["count": .int(count)])]))
                    saves.append((count, result.transaction))
                    if count == 5 { started.lock.withLock { $0 += 1 } }
                }
                await connection.close()
                return saves
            }
        }
        while started.lock.withLock({ $0 }) < writerCount { try await Task.sleep(for: .milliseconds(10)) }

        let destination = scratch.appendingPathComponent("copy")
        let token: JSONValue = "backup-1"
        let progress = ProgressLog(admin, token: token)
        let backup = try await admin.call(
            ServerBackup.self, .init(destination: destination.path, workDoneToken: token), timeout: .seconds(300))
        stop.lock.withLock { $0 = true }
        var saves: [[(count: Int64, transaction: Int64)]] = []
        for writer in writers { saves.append(try await writer.value) }
        let latest = try await admin.call(ServerStats.self, .init()).store.transaction

        XCTAssertEqual(backup.path, destination.appendingPathComponent("depot.sqlite").path)
        XCTAssertGreaterThan(backup.sizeBytes, 1_000_000)
        XCTAssertGreaterThan(backup.transaction, sentinelSave.transaction)
        XCTAssertTrue(saves.allSatisfy { $0.contains { $0.transaction <= backup.transaction } })
        XCTAssertTrue(saves.allSatisfy { $0.contains { $0.transaction > backup.transaction } }, "writes went on")
        let entries = try await history(admin, since: 0)
        XCTAssertEqual(entries.last, latest)

        // The subscriber kept up with every write, the backup's time included.
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if let stats = try await admin.call(ServerStats.self, .init()).subscriptions.first,
                stats.transaction == latest
            {
                break
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        await subscriber.close()
        let (subscriberLast, subscriberChanges) = await seen.value
        XCTAssertEqual(subscriberLast, latest)
        XCTAssertGreaterThan(subscriberChanges, 0)

        // Progress: begin, reports of pages, end not cancelled.
        let values = progress.values
        XCTAssertEqual(values.first?.kind, .begin)
        XCTAssertEqual(values.last?.kind, .end)
        XCTAssertEqual(values.last?.cancelled, false)
        let reports = values.filter { $0.kind == .report }
        XCTAssertFalse(reports.isEmpty)
        XCTAssertEqual(values.last?.completed, reports.last?.total)
        await admin.close()
        XCTAssertEqual(daemon.stop(), 0)

        // Nothing but the store file was left in the destination.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: destination.path), ["depot.sqlite"])

        // A daemon on the copy serves exactly the store as of the backup's transaction.
        let copy = try Daemon(dataDirectory: destination)
        let reader = try await copy.connect(name: "reader")
        let stats = try await reader.call(ServerStats.self, .init())
        XCTAssertEqual(stats.store.transaction, backup.transaction)
        let copyHistory = try await history(reader, since: 0)
        XCTAssertEqual(copyHistory, entries.filter { $0 <= backup.transaction }, "history ends at the transaction")
        let model = try await reader.call(ModelGet.self, Empty())
        XCTAssertEqual(Set(model.entities.map(\.name)), ["Item", "Counter"])

        let counterObjects =
            try await reader.call(
                StoreFetch.self, FetchRequest(entity: "Counter", sort: [SortDescriptor(key: "writer")])
            ).objects ?? []
        XCTAssertEqual(
            counterObjects.map { $0["count"]?.intValue },
            saves.map { writer in writer.last { $0.transaction <= backup.transaction }?.count })
        let expectedNames = Set(
            saves.enumerated().flatMap { writer, saves in
                saves.filter { $0.transaction <= backup.transaction }.map { "writer \(writer) save \($0.count)" }
            })
        let written =
            try await reader.call(
                StoreFetch.self,
                FetchRequest(
                    entity: "Item", predicate: "name BEGINSWITH 'writer '", resultType: .dictionaries,
                    properties: ["name"])
            ).objects ?? []
        XCTAssertEqual(Set(written.compactMap { $0["name"]?.stringValue }), expectedNames)
        let items = try await reader.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(items, rows + 1 + expectedNames.count)

        // The save ids came along: the sentinel save replayed on the copy is answered, not applied again.
        let replayed = try await reader.call(StoreSave.self, sentinel)
        XCTAssertEqual(replayed.transaction, sentinelSave.transaction)
        let value1 = try await reader.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(value1, items)
        await reader.close()
        XCTAssertEqual(copy.stop(), 0)
    }

    /// The transactions of history since `since`, in order.
    private func history(_ connection: DepotConnection, since: Int64) async throws -> [Int64] {
        try await connection.call(StoreHistory.self, .init(since: since, limit: 100_000)).transactions.map(
            \.transaction)
    }

    func testADaemonKilledDuringABackupLeavesItsStoreWholeAndNoCopy() async throws {
        try XCTSkipIf(onPostgres, "a PostgreSQL store is backed up with pg_dump")
        let daemon = try Daemon()
        defer { daemon.removeData() }
        let admin = try await daemon.connect(name: "admin")
        _ = try await admin.call(ModelDefine.self, .init(entities: Self.model))
        let rows = 200_000
        try await loadItems(rows, into: admin)
        let transaction = try await admin.call(ServerStats.self, .init()).store.transaction

        let destination = scratch.appendingPathComponent("copy")
        let token: JSONValue = "backup-killed"
        let progress = ProgressLog(admin, token: token)
        let call = Task {
            try await admin.call(
                ServerBackup.self, .init(destination: destination.path, workDoneToken: token), timeout: .seconds(60))
        }
        // Killed at its first report of pages copied, before the last.
        let deadline = ContinuousClock.now + .seconds(60)
        var report: WorkDoneProgress?
        while report == nil, ContinuousClock.now < deadline {
            report = progress.values.first { $0.kind == .report }
            if report == nil { try await Task.sleep(for: .milliseconds(1)) }
        }
        _ = daemon.kill()
        let first = try XCTUnwrap(report)
        XCTAssertLessThan(first.completed ?? 0, first.total ?? 0, "killed while pages remained")
        call.cancel()
        XCTAssertFalse(progress.values.contains { $0.kind == .end })

        // No store file in the destination: only the hidden partial copy, which no daemon opens.
        let left = (try? FileManager.default.contentsOfDirectory(atPath: destination.path)) ?? []
        XCTAssertFalse(left.contains("depot.sqlite"), "\(left)")
        XCTAssertTrue(left.allSatisfy { $0.hasPrefix(".depot.sqlite.partial-") }, "\(left)")

        // The old store is whole: a daemon on it serves every row and the same history.
        let again = try Daemon(dataDirectory: daemon.dataDirectory)
        let reader = try await again.connect(name: "reader")
        let value2 = try await reader.call(ServerStats.self, .init()).store.transaction
        XCTAssertEqual(value2, transaction)
        let value3 = try await reader.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(value3, rows)
        // And a backup into the same destination now completes, removing the dead backup's partial copy
        // (aged here past the minute after which a partial copy counts as abandoned).
        for name in left {
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(-120)],
                ofItemAtPath: destination.appendingPathComponent(name).path)
        }
        let backup = try await reader.call(
            ServerBackup.self, .init(destination: destination.path), timeout: .seconds(120))
        XCTAssertEqual(backup.transaction, transaction)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: destination.path), ["depot.sqlite"])
        await reader.close()
        XCTAssertEqual(again.stop(), 0)
    }

    func testBadDestinationsAreRefusedNamingTheField() async throws {
        try XCTSkipIf(onPostgres, "a PostgreSQL store is backed up with pg_dump")
        let daemon = try Daemon()
        defer { daemon.removeData() }
        let admin = try await daemon.connect(name: "admin")
        try await admin.loadItems(3)
        let file = scratch.appendingPathComponent("a-file")
        try Data("x".utf8).write(to: file)
        let taken = scratch.appendingPathComponent("taken")
        _ = try await admin.call(ServerBackup.self, .init(destination: taken.path))
        for (destination, words) in [
            ("relative/dir", "not an absolute path"), (file.path, "not a directory"),
            (taken.path, "already holds a store"), (daemon.dataDirectory.path, "already holds a store"),
        ] {
            do {
                _ = try await admin.call(ServerBackup.self, .init(destination: destination))
                XCTFail("\(destination) was accepted")
            } catch {
                let rpc = try XCTUnwrap(error.rpcError, "\(error)")
                XCTAssertEqual(rpc.code, .invalidParams)
                XCTAssertEqual(rpc.data?["field"], "destination")
                XCTAssertTrue(rpc.message.contains(words), rpc.message)
            }
        }
        let value4 = try await admin.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(value4, 3)
        await admin.close()
        XCTAssertEqual(daemon.stop(), 0)
    }

    func testDepotBackupCopiesAndPrintsTheTransaction() async throws {
        try XCTSkipIf(onPostgres, "a PostgreSQL store is backed up with pg_dump")
        let daemon = try Daemon()
        defer { daemon.removeData() }
        let admin = try await daemon.connect(name: "admin")
        try await admin.loadItems(5)
        let transaction = try await admin.call(ServerStats.self, .init()).store.transaction
        await admin.close()
        let destination = scratch.appendingPathComponent("cli copy")
        let outcome = try ProcessOutcome.run(
            Executables.depot, ["backup", "--connect", daemon.endpoint, destination.path, "--json"],
            timeout: .seconds(30))
        XCTAssertEqual(outcome.status, 0, outcome.errors)
        let result = try JSONCoding.decode(
            ServerBackup.Result.self, from: try JSONParser.parse(Array(outcome.output.utf8)))
        XCTAssertEqual(result.transaction, transaction)
        XCTAssertTrue(FileManager.default.fileExists(atPath: result.path))
        XCTAssertEqual(daemon.stop(), 0)

        let copy = try Daemon(dataDirectory: destination)
        let reader = try await copy.connect(name: "reader")
        let value5 = try await reader.call(StoreCount.self, FetchRequest(entity: "Item")).count
        XCTAssertEqual(value5, 5)
        await reader.close()
        XCTAssertEqual(copy.stop(), 0)
    }

    /// On a PostgreSQL store (`scripts/with-postgres.sh`), the backup is refused pointing to pg_dump.
    func testClusterRefusesBackup() async throws {
        try XCTSkipUnless(onPostgres, "needs DEPOT_TEST_STORE (scripts/with-postgres.sh)")
        let daemon = try Daemon()
        defer { daemon.removeData() }
        let admin = try await daemon.connect(name: "admin")
        try await admin.loadItems(3)
        do {
            _ = try await admin.call(ServerBackup.self, .init(destination: scratch.appendingPathComponent("c").path))
            XCTFail("a cluster's daemon wrote a backup")
        } catch {
            let rpc = try XCTUnwrap(error.rpcError, "\(error)")
            XCTAssertEqual(rpc.code, .invalidRequest)
            XCTAssertTrue(rpc.message.contains("pg_dump"), rpc.message)
            XCTAssertTrue(rpc.message.contains("docs/cluster.md"), rpc.message)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch.appendingPathComponent("c").path))
        await admin.close()
        XCTAssertEqual(daemon.stop(), 0)
    }
}
