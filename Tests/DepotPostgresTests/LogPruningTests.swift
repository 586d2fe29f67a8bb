import DepotPostgres
import DepotProtocol
import DepotStore
import Foundation
import GRDB
import Logging
import PostgresNIO
import Synchronization
import XCTest

/// The cluster's log pruned (DESIGN.md section 11) and replicas that rebuild themselves from the
/// snapshot, against a real PostgreSQL and real replicas: pruning never removes what a daemon
/// seen within the grace still needs; a replica the log was pruned past, or whose file was changed
/// behind its back, comes back to exactly what the others hold.
final class LogPruningTests: XCTestCase {
    private static let team = EntityDescription(
        name: "Team",
        attributes: [
            AttributeDescription(name: "name", type: .string),
            AttributeDescription(name: "wins", type: .integer, defaultValue: 0),
            AttributeDescription(name: "active", type: .boolean, defaultValue: true),
            AttributeDescription(name: "rating", type: .double, defaultValue: 0),
            AttributeDescription(name: "logo", type: .binary, optional: true),
        ],
        relationships: [RelationshipDescription(name: "tags", destination: "Tag", toMany: true, inverse: "teams")])
    private static let tag = EntityDescription(
        name: "Tag", attributes: [AttributeDescription(name: "label", type: .string)],
        relationships: [RelationshipDescription(name: "teams", destination: "Team", toMany: true, inverse: "tags")])

    /// Entries go up to the oldest position of the daemons seen within the grace, never past it:
    /// the daemon behind catches up from the log without a rebuild. Once it has moved on, the
    /// retention decides (the newest 5); a size bound combined with others keeps the newest entry.
    func testPruningKeepsWhatEveryDaemonSeenWithinTheGraceStillNeeds() throws {
        let url = try TestReplica.clusterURL("pruning")
        let a = try PostgresReplication(url: url, node: "a", logRetention: .count(5), logGrace: .seconds(60))
        let b = try PostgresReplication(url: url, node: "b", logRetention: .count(5), logGrace: .seconds(60))
        defer { [a, b].forEach { $0.stop() } }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        let (second, secondPath) = try TestReplica.open(b)
        var ids: [String] = []
        for index in 0..<10 { ids.append(try insertTeam(first, index)) }
        try second.catchUpWithCluster()
        let behind = second.replicaPosition
        try b.recordPosition(behind)
        for index in 10..<30 {
            _ = try first.save(update(ids[index % ids.count], wins: index), writeScope: .unrestricted)
        }
        try a.recordPosition(first.replicaPosition)

        XCTAssertEqual(try a.prune(), behind, "everything the daemon behind has applied, nothing more")
        XCTAssertEqual(try a.firstEntry(), behind + 1)
        let vacuums = try PostgresServer.sharedOrFail().withConnectionBlocking { connection, logger in
            try await connection.query(
                """
                SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = \(url.schema) AND relname = 'change_log'
                """, logger: logger
            ).collect().first?.decode(Int64.self)
        }
        XCTAssertGreaterThanOrEqual(
            vacuums ?? 0, 1, "a prune that removed entries vacuums the log, so new entries reuse their space")
        try second.catchUpWithCluster()
        XCTAssertFalse(second.takeRebuild(), "the log still had what it needed")
        XCTAssertEqual(second.replicaPosition, first.replicaPosition)
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        XCTAssertEqual(
            try second.history(since: 0, limit: nil).transactions, try first.history(since: 0, limit: nil).transactions)

        // Both at the head: the retention keeps the newest 5.
        let head = first.replicaPosition
        try b.recordPosition(second.replicaPosition)
        try a.prune()
        XCTAssertEqual(try a.firstEntry(), head - 4)
        XCTAssertEqual(try a.entries(after: 0, limit: 100).map(\.number), Array((head - 4)...head))

        // Whichever bound keeps less: a size of one byte leaves only the newest entry.
        let c = try PostgresReplication(
            url: url, node: "c", logRetention: .all([.count(1000), .age(3600), .size(1)]), logGrace: .seconds(60))
        defer { c.stop() }
        try c.prune()
        XCTAssertEqual(try c.entries(after: 0, limit: 100).map(\.number), [head])
        // The log goes on from there.
        _ = try second.save(update(ids[0], wins: 100), writeScope: .unrestricted)
        try first.catchUpWithCluster()
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
    }

    /// A daemon away longer than the grace holds nothing back: the log is pruned past it, and when
    /// it comes back on its data directory it rebuilds itself from the snapshot (its history
    /// begins there, and it reads the snapshot a few rows at a time), then follows and writes
    /// like the others.
    func testADaemonAwayPastThePrunedPointRebuildsFromTheSnapshotAndFollows() throws {
        let url = try TestReplica.clusterURL("away")
        let grace = Duration.milliseconds(300)
        let a = try PostgresReplication(url: url, node: "a", logRetention: .count(3), logGrace: grace)
        defer { a.stop() }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        var ids: [String] = []
        for index in 0..<10 { ids.append(try insertTeam(first, index)) }
        let secondPath = TestReplica.temporaryPath()
        let away: Int64
        do {
            let b = try PostgresReplication(url: url, node: "b", logRetention: .count(3), logGrace: grace)
            defer { b.stop() }
            let second = try Store(path: secondPath, replication: b)
            away = second.replicaPosition
            try b.recordPosition(away)
        }
        // Updates, deletes and new objects while it is away.
        for index in 0..<12 { _ = try first.save(update(ids[index % 8], wins: 50 + index), writeScope: .unrestricted) }
        _ = try first.save(StoreSave.Parameters(deleted: [DeletedObject(id: ids[9])]), writeScope: .unrestricted)
        ids.append(try insertTeam(first, 10))
        Thread.sleep(forTimeInterval: 0.5)
        try a.recordPosition(first.replicaPosition)
        XCTAssertGreaterThan(try a.prune(), 0)
        XCTAssertGreaterThan(try a.firstEntry(), away + 1, "pruned past the daemon away")

        // Three rows a round trip: the snapshot is read in many batches.
        let b = try PostgresReplication(
            url: url, node: "b", logRetention: .count(3), logGrace: grace, snapshotBatch: 3)
        defer { b.stop() }
        let second = try Store(path: secondPath, replication: b)
        XCTAssertTrue(second.takeRebuild(), "rebuilt from the snapshot")
        XCTAssertNil(second.divergenceError)
        XCTAssertEqual(second.replicaPosition, first.replicaPosition)
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        let begins = try XCTUnwrap(second.historyBegins())
        XCTAssertEqual(begins, try first.latestTransaction())
        XCTAssertEqual(try second.latestTransaction(), try first.latestTransaction())

        // It follows and writes from there; history agrees over the range both hold.
        _ = try first.save(update(ids[0], wins: 1), writeScope: .unrestricted)
        try second.catchUpWithCluster()
        let (saved, transaction) = try second.save(
            StoreSave.Parameters(inserted: [InsertedObject(entity: "Team", tempId: "n", values: ["name": "back"])]),
            writeScope: .unrestricted)
        XCTAssertEqual(saved.ids["n"], "Team/12", "ids given before the rebuild are not given again")
        XCTAssertEqual(transaction?.number, begins + 2)
        try first.catchUpWithCluster()
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        XCTAssertEqual(
            try second.history(since: begins, limit: nil).transactions,
            try first.history(since: begins, limit: nil).transactions)
    }

    /// Rows changed and deleted in a replica's file behind its back: the next entry that touches
    /// them does not apply (a changeset conflict), and the replica rebuilds itself from the
    /// snapshot instead of refusing to follow; it then holds exactly what the others hold.
    func testAReplicaChangedBehindItsBackRepairsItselfWhenAnEntryConflicts() throws {
        let url = try TestReplica.clusterURL("conflict")
        let a = try PostgresReplication(url: url, node: "a")
        let b = try PostgresReplication(url: url, node: "b")
        defer { [a, b].forEach { $0.stop() } }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        var ids: [String] = []
        for index in 0..<6 { ids.append(try insertTeam(first, index)) }
        let (second, secondPath) = try TestReplica.open(b)
        try edit(secondPath) { db in
            try db.execute(sql: "UPDATE e_Team SET wins = 999 WHERE id = 1")
            try db.execute(sql: "DELETE FROM e_Team WHERE id = 2")
        }
        XCTAssertNotEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))

        _ = try first.save(update(ids[0], wins: 7), writeScope: .unrestricted)
        _ = try first.save(update(ids[1], wins: 8), writeScope: .unrestricted)
        try second.catchUpWithCluster()
        XCTAssertTrue(second.takeRebuild())
        XCTAssertNil(second.divergenceError)
        XCTAssertEqual(second.replicaPosition, first.replicaPosition)
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        // And it writes again.
        _ = try second.save(update(ids[2], wins: 9), writeScope: .unrestricted)
        try first.catchUpWithCluster()
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
    }

    /// A row changed in a stopped replica's file, in a column no later entry changes (no changeset
    /// would ever conflict): the full checksum at start-up finds it, and the replica rebuilds itself.
    func testAReplicaChangedWhileStoppedIsFoundAtStartUpAndRebuilt() throws {
        let url = try TestReplica.clusterURL("startup")
        let a = try PostgresReplication(url: url, node: "a")
        defer { a.stop() }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        for index in 0..<5 { _ = try insertTeam(first, index) }
        let secondPath = TestReplica.temporaryPath()
        do {
            let b = try PostgresReplication(url: url, node: "b")
            defer { b.stop() }
            let second = try Store(path: secondPath, replication: b)
            XCTAssertEqual(
                try TestReplica.checksums(secondPath).offset, "0", "the snapshot's tables agree with the log")
            _ = try second.save(update("Team/3", wins: 4), writeScope: .unrestricted)
        }
        try first.catchUpWithCluster()
        try edit(secondPath) { db in try db.execute(sql: "UPDATE e_Team SET name = 'changed by hand' WHERE id = 2") }

        let b = try PostgresReplication(url: url, node: "b")
        defer { b.stop() }
        let second = try Store(path: secondPath, replication: b)
        XCTAssertTrue(second.takeRebuild(), "found at start-up")
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        // A restart with nothing changed rebuilds nothing.
        let c = try PostgresReplication(url: url, node: "c")
        defer { c.stop() }
        let again = try Store(path: firstPath, replication: c)
        XCTAssertFalse(again.takeRebuild())
    }

    /// A row changed behind a running replica's back in a column the next entry leaves alone: the
    /// changeset applies without a conflict, but the checksum the entry carries differs from the
    /// replica's, and the replica rebuilds itself.
    func testAnEntryWhoseChecksumDiffersMakesTheReplicaRebuildItself() throws {
        let url = try TestReplica.clusterURL("checksum")
        let a = try PostgresReplication(url: url, node: "a")
        let b = try PostgresReplication(url: url, node: "b")
        defer { [a, b].forEach { $0.stop() } }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        var ids: [String] = []
        for index in 0..<5 { ids.append(try insertTeam(first, index)) }
        let (second, secondPath) = try TestReplica.open(b)
        // Entries carry the checksum of what they leave.
        XCTAssertTrue(try a.entries(after: 0, limit: 100).allSatisfy { $0.checksum != nil })
        try edit(secondPath) { db in try db.execute(sql: "UPDATE e_Team SET rating = 99.5 WHERE id = 1") }

        _ = try first.save(update(ids[0], wins: 3), writeScope: .unrestricted)
        try second.catchUpWithCluster()
        XCTAssertTrue(second.takeRebuild())
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        // Both follow on with equal checksums: no rebuild for an ordinary entry.
        _ = try second.save(update(ids[1], wins: 5), writeScope: .unrestricted)
        try first.catchUpWithCluster()
        XCTAssertFalse(first.takeRebuild())
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
    }

    /// The ids of committed saves travel to PostgreSQL with their entries and come with the
    /// snapshot: a save resent with its `saveId` to a daemon that joined after it committed is
    /// answered as before and appends nothing; so it is after a rebuild.
    func testADaemonFromASnapshotRecognizesASaveResentWithItsSaveId() throws {
        let url = try TestReplica.clusterURL("saveids")
        let a = try PostgresReplication(url: url, node: "a")
        defer { a.stop() }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        let save = StoreSave.Parameters(
            inserted: [InsertedObject(entity: "Team", tempId: "t", values: ["name": "resent"])], saveId: "resent-1")
        let (answer, _) = try first.save(save, writeScope: .unrestricted)
        _ = try insertTeam(first, 1)

        let b = try PostgresReplication(url: url, node: "b")
        defer { b.stop() }
        let (joined, joinedPath) = try TestReplica.open(b)
        let head = try XCTUnwrap(a.entries(after: 0, limit: 100).last?.number)
        let (again, transaction) = try joined.save(save, writeScope: .unrestricted)
        XCTAssertEqual(again, answer, "answered as before")
        XCTAssertNil(transaction)
        XCTAssertEqual(try a.entries(after: 0, limit: 100).last?.number, head, "nothing appended")

        // Rebuilt from the snapshot (a row changed behind its back), it still knows the id.
        try edit(joinedPath) { db in try db.execute(sql: "UPDATE e_Team SET wins = 7 WHERE id = 1") }
        _ = try first.save(update("Team/1", wins: 8), writeScope: .unrestricted)
        try joined.catchUpWithCluster()
        XCTAssertTrue(joined.takeRebuild())
        XCTAssertEqual(try joined.save(save, writeScope: .unrestricted).0, answer)
        XCTAssertEqual(try TestReplica.objectTables(joinedPath), try TestReplica.objectTables(firstPath))
    }

    /// A write that finds, under the cluster's write lock, that its replica diverged (an entry it
    /// missed leaves a different checksum) releases the lock before the replica rebuilds itself:
    /// while the snapshot is read another connection can take the lock. The write then runs again
    /// under the lock and commits once, on the rebuilt replica.
    func testAWriteThatFindsItsReplicaDivergedRebuildsItOutsideTheWriteLock() throws {
        let url = try TestReplica.clusterURL("unlocked")
        let a = try PostgresReplication(url: url, node: "a")
        let b = WatchedReplication(try PostgresReplication(url: url, node: "b", snapshotBatch: 2), url: url)
        defer { [a, b.replication].forEach { $0.stop() } }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        var ids: [String] = []
        for index in 0..<6 { ids.append(try insertTeam(first, index)) }
        let secondPath = TestReplica.temporaryPath()
        let second = try Store(path: secondPath, replication: b)
        XCTAssertEqual(b.lockFreeDuringSnapshots, [true], "joined from the snapshot")
        try edit(secondPath) { db in try db.execute(sql: "UPDATE e_Team SET rating = 42.5 WHERE id = 1") }
        // The next entry touches that row: the replica finds it out while applying it, which its
        // own write does under the lock (its first, unlocked try is refused: the log moved on).
        _ = try first.save(update(ids[0], wins: 3), writeScope: .unrestricted)
        let head = try XCTUnwrap(a.entries(after: 0, limit: 100).last?.number)

        let (_, transaction) = try second.save(update(ids[1], wins: 5), writeScope: .unrestricted)
        XCTAssertTrue(second.takeRebuild(), "rebuilt from the snapshot")
        XCTAssertEqual(b.lockFreeDuringSnapshots, [true, true], "the write lock was free while the snapshot was read")
        XCTAssertNil(second.divergenceError)
        XCTAssertEqual(try a.entries(after: 0, limit: 100).map(\.number), Array(1...(head + 1)), "appended once")
        XCTAssertEqual(second.replicaPosition, head + 1)
        try first.catchUpWithCluster()
        XCTAssertEqual(try first.latestTransaction(), transaction?.number)
        XCTAssertEqual(try TestReplica.objectTables(secondPath), try TestReplica.objectTables(firstPath))
        XCTAssertEqual(try TestReplica.objectTables(firstPath)["e_Team"]?[1]["wins"], 5.databaseValue)
    }

    /// PostgreSQL stops while a new daemon reads the snapshot (after its first batch of rows): the
    /// start fails with -32603 naming PostgreSQL, and the data directory keeps nothing of the
    /// half-read snapshot. Started again once the server is back, it loads the whole snapshot,
    /// equals the others and follows the log.
    func testPostgreSQLRestartingDuringABootstrapLeavesNothingHalfLoaded() throws {
        let server = try PostgresServer.start()
        defer { try? server.stop() }
        var url = server.url
        url.schema = uniqueSchema("bootstrap")
        let a = try PostgresReplication(url: url, node: "a")
        defer { a.stop() }
        let (first, firstPath) = try TestReplica.open(a)
        _ = try first.defineModel([Self.team, Self.tag])
        var ids: [String] = []
        for index in 0..<8 { ids.append(try insertTeam(first, index)) }

        let joiningPath = TestReplica.temporaryPath()
        let b = WatchedReplication(try PostgresReplication(url: url, node: "b", snapshotBatch: 2), url: url)
        b.afterFirstBatch = { _ = try? server.pause() }
        XCTAssertThrowsError(try Store(path: joiningPath, replication: b)) { error in
            XCTAssertEqual((error as? RPCError)?.code, .internalError)
            XCTAssertTrue("\(error)".contains("PostgreSQL"), "\(error)")
        }
        b.replication.stop()
        XCTAssertEqual(try TestReplica.objectTables(joiningPath), [:], "nothing of the half-read snapshot stays")

        try server.resume()
        let c = try PostgresReplication(url: url, node: "b", snapshotBatch: 2)
        defer { c.stop() }
        let joined = try Store(path: joiningPath, replication: c)
        XCTAssertEqual(joined.replicaPosition, first.replicaPosition)
        XCTAssertEqual(try TestReplica.objectTables(joiningPath), try TestReplica.objectTables(firstPath))
        // The first daemon's connection was cut too: it reconnects, writes, and the new one follows.
        var saved = false
        for _ in 0..<100 where !saved {
            saved = (try? first.save(update(ids[0], wins: 11), writeScope: .unrestricted)) != nil
            if !saved { Thread.sleep(forTimeInterval: 0.05) }
        }
        XCTAssertTrue(saved, "writes resume after the restart")
        try joined.catchUpWithCluster()
        XCTAssertEqual(try TestReplica.objectTables(joiningPath), try TestReplica.objectTables(firstPath))
    }

    // MARK: Helpers

    /// Inserts a team with a tag of its own, both related; returns the team's id.
    private func insertTeam(_ store: Store, _ index: Int) throws -> String {
        let saved = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(
                    entity: "Team", tempId: "t",
                    values: [
                        "name": .string("team \(index)"), "active": .bool(index % 2 == 0),
                        "rating": .double(Double(index) / 4),
                        "logo": .string(Data([UInt8(index), 0xff]).base64EncodedString()),
                        "tags": [.string("g")],
                    ]),
                InsertedObject(entity: "Tag", tempId: "g", values: ["label": .string("tag \(index)")]),
            ]), writeScope: .unrestricted
        ).0.ids
        return saved["t"]!
    }

    private func update(_ id: String, wins: Int) -> StoreSave.Parameters {
        StoreSave.Parameters(updated: [UpdatedObject(id: id, values: ["wins": .int(Int64(wins))])])
    }

    /// Changes the replica's file with a connection of its own, as sqlite3 would.
    private func edit(_ path: String, _ body: (Database) throws -> Void) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.write(body)
    }

}

/// A daemon's real ``PostgresReplication`` that, each time a snapshot begins to be read, asks
/// PostgreSQL on a connection of its own whether the cluster's write lock is free, and can act
/// after a snapshot's first batch (stop the server).
private final class WatchedReplication: StoreReplication, @unchecked Sendable {
    // @unchecked: `lockFree` is touched on the store's writer only, then read by the test after.
    let replication: PostgresReplication
    private let url: PostgresURL
    private var lockFree: [Bool] = []
    private var batches = 0
    /// Called once, after a snapshot's first batch of rows was handed over.
    var afterFirstBatch: (() -> Void)?

    init(_ replication: PostgresReplication, url: PostgresURL) {
        self.replication = replication
        self.url = url
    }

    /// One answer per snapshot read: whether another session could take the write lock.
    var lockFreeDuringSnapshots: [Bool] { lockFree }

    func beginWrite(after position: Int64, locked: Bool) throws(RPCError) -> [ReplicatedEntry] {
        try replication.beginWrite(after: position, locked: locked)
    }

    func commitWrite(_ entries: [ReplicatedEntry], tables: ObjectTablesChange?) throws(RPCError) -> Bool {
        try replication.commitWrite(entries, tables: tables)
    }

    func abandonWrite() { replication.abandonWrite() }

    func entries(after position: Int64, limit: Int) throws(RPCError) -> [ReplicatedEntry] {
        try replication.entries(after: position, limit: limit)
    }

    func startFollowing(position: @escaping @Sendable () -> Int64, _ newEntries: @escaping @Sendable () -> Void) {
        replication.startFollowing(position: position, newEntries)
    }

    func readSnapshot(
        begin: (ReplicaSnapshot) throws -> Void, rows: (_ table: String, _ batch: ReplicaSnapshot.Batch) throws -> Void
    ) throws -> Bool {
        try replication.readSnapshot(
            begin: { snapshot in
                lockFree.append(try Self.lockIsFree(url: url, key: replication.log.lockKey))
                try begin(snapshot)
            },
            rows: { table, batch in
                try rows(table, batch)
                batches += 1
                if batches == 1 { afterFirstBatch?() }
            })
    }

    func stop() { replication.stop() }

    /// Whether a new session takes the advisory lock `key` at once (it then frees it).
    private static func lockIsFree(url: PostgresURL, key: Int64) throws -> Bool {
        let outcome = Mutex<Result<Bool, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let logger = Logger(label: "depot.tests.lock")
            let result: Result<Bool, any Error>
            do {
                // Closing the session frees the lock if it took it.
                let connection = try await PostgresConnection.connect(
                    configuration: url.configuration, id: 1, logger: logger)
                defer { Task { try? await connection.close() } }
                let rows = try await connection.query("SELECT pg_try_advisory_lock(\(key))", logger: logger).collect()
                result = .success(try rows.first?.decode(Bool.self) ?? false)
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }
}
