import DepotProtocol
import Foundation
import GRDB
import Synchronization
import XCTest

@testable import DepotStore

/// Stores as replicas of one log, in memory (the store's side of DESIGN section 11; the PostgreSQL
/// log and real daemons are tested in Tests/DepotPostgresTests and clients/python/tests/test_cluster.py).
final class ReplicationTests: XCTestCase {
    func testAReplicaReachesTheStateOfTheStoreThatWroteAndNumbersAlike() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        let france = try a.insertTeam("France", zone: "Europe", wins: 3)
        let japan = try b.insertTeam("Japan", zone: "Asia", wins: 1)  // b catches up under the lock first
        let (_, moved) = try a.save(
            StoreSave.Parameters(
                inserted: [
                    InsertedObject(entity: "Player", tempId: "p", values: ["name": "Kylian", "team": .string(france)])
                ],
                updated: [UpdatedObject(id: japan, values: ["wins": 7])]), writeScope: .unrestricted)
        XCTAssertEqual(moved?.number, 3, "numbered as on a lone store: the model change takes no number")
        try b.catchUpWithCluster()
        XCTAssertEqual(
            b.takeCommittedTransactions().map(\.number), [1, 2, 3],
            "b's commit stream: a's first transaction, applied under the lock, then its own, then a's next")
        let request = FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")])
        XCTAssertEqual(
            try JSONCoding.encode(b.fetch(request, scope: .unrestricted)),
            try JSONCoding.encode(a.fetch(request, scope: .unrestricted)))
        let players = FetchRequest(entity: "Player", sort: [SortDescriptor(key: "name")])
        XCTAssertEqual(
            try JSONCoding.encode(b.fetch(players, scope: .unrestricted)),
            try JSONCoding.encode(a.fetch(players, scope: .unrestricted)))
        XCTAssertEqual(
            try b.history(since: 0, limit: nil).transactions, try a.history(since: 0, limit: nil).transactions)
        XCTAssertEqual(b.replicaPosition, a.replicaPosition)
    }

    func testAWriteThatFailsOrChangesNothingAppendsNothing() throws {
        let log = MemoryLog()
        let a = try replica(log)
        _ = try a.defineModel(testModel)
        _ = try a.defineModel(testModel)  // unchanged: no entry
        _ = try a.insertTeam("France", zone: "Europe")
        assertRPCError(.uniqueConstraint) { try a.insertTeam("France", zone: "Europe") }
        XCTAssertEqual(log.count, 2, "the model and one save")
        XCTAssertEqual(log.lockHeld, false)
    }

    func testALogThatRefusesTheCommitRollsTheLocalWriteBack() throws {
        let log = MemoryLog()
        let a = try replica(log)
        _ = try a.defineModel(testModel)
        log.refuseNextCommit()
        assertRPCError(.internalError) { try a.insertTeam("France", zone: "Europe") }
        XCTAssertEqual(
            try a.count(FetchRequest(entity: "Team"), scope: .unrestricted), 0,
            "nothing the log lacks stays in the replica")
        XCTAssertEqual(try a.latestTransaction(), 0)
        _ = try a.insertTeam("France", zone: "Europe")
        XCTAssertEqual(try a.latestTransaction(), 1)
    }

    func testAReplicaBehindTheLogWritesAgainUnderTheLockAndGetsTheAnswerThatCounts() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        _ = try a.insertTeam("France", zone: "Europe")
        // b has seen neither the model nor France: its first try fails, the locked one decides.
        assertRPCError(.uniqueConstraint) { try b.insertTeam("France", zone: "Europe") }
        XCTAssertEqual(log.lockedWrites, 1)
        _ = try b.insertTeam("Japan", zone: "Asia")
        XCTAssertEqual(log.lockedWrites, 1, "b is at the head now: no lock needed")
        XCTAssertEqual(log.count, 3)
    }

    func testAWriteThatChangesNothingOnAStaleReplicaIsDecidedUnderTheLock() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        let france = try a.insertTeam("France", zone: "Europe", wins: 3)
        try b.catchUpWithCluster()
        _ = try a.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": 6])]), writeScope: .unrestricted)
        // b still says 3: setting 3 looks like no change there, but it is one in the cluster.
        let (_, transaction) = try b.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": 3])]), writeScope: .unrestricted)
        XCTAssertNotNil(transaction, "the save changed wins from 6 back to 3")
        XCTAssertEqual(log.lockedWrites, 1)
        try a.catchUpWithCluster()
        let wins = try a.objects(ids: [france], properties: ["wins"], scope: .unrestricted).first?["wins"]
        XCTAssertEqual(wins, 3)
    }

    func testAStaleReplicasGroupRunTwiceIsReportedOnceAfterWhatItApplied() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        try b.catchUpWithCluster()
        _ = try a.insertTeam("France", zone: "Europe")
        // b is one transaction behind: its group's first try is refused by the log and rolled back,
        // then runs again under the lock after applying a's save.
        try b.writeGroup { group in
            for name in ["Japan", "Brazil"] {
                _ = try? b.save(
                    StoreSave.Parameters(inserted: [
                        InsertedObject(entity: "Team", values: ["teamName": .string(name), "qualifyingZone": "Z"])
                    ]), in: group, writeScope: .unrestricted)
            }
        }
        XCTAssertEqual(log.lockedWrites, 1, "the group ran a second time, under the lock")
        XCTAssertEqual(try b.latestTransaction(), 3, "both saves committed")
        let stream = b.takeCommittedTransactions()
        XCTAssertEqual(stream.map(\.number), [1, 2, 3], "the refused try left nothing behind")
        XCTAssertEqual(stream.map { $0.changes["Team"]?.inserted.count }, [1, 1, 1])
    }

    func testAGroupCommitIsOneEntryPerSaveAppliedTogether() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        try a.writeGroup { group in
            for name in ["France", "Japan", "Brazil"] {
                _ = try? a.save(
                    StoreSave.Parameters(inserted: [
                        InsertedObject(entity: "Team", values: ["teamName": .string(name), "qualifyingZone": "Z"])
                    ]), in: group, writeScope: .unrestricted)
            }
        }
        let entries = try log.entries(after: 1, limit: 10)
        XCTAssertEqual(entries.count, 3, "one entry per save")
        let continued = entries.map { entry -> Bool in
            if case .data(_, _, _, let continued) = entry.content { return continued }
            return false
        }
        XCTAssertEqual(continued, [true, true, false])
        // A read that cuts the group applies nothing of it; the next read applies it whole.
        log.readLimit = 3
        try b.catchUpWithCluster()
        XCTAssertEqual(b.takeCommittedTransactions().map(\.number), [1, 2, 3])
        let request = FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")])
        XCTAssertEqual(
            try JSONCoding.encode(b.fetch(request, scope: .unrestricted)),
            try JSONCoding.encode(a.fetch(request, scope: .unrestricted)))
    }

    /// Without a snapshot to rebuild from (this log keeps none), a replica that cannot follow the
    /// log refuses writes and reads (no stale read), and says why.
    func testAReplicaThatCannotFollowTheLogRefusesToWriteAndSaysWhy() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        _ = try a.insertTeam("France", zone: "Europe")
        try b.catchUpWithCluster()
        // An entry whose transaction number this replica cannot have reached.
        log.appendUnchecked(
            ReplicatedEntry(
                number: 3, author: nil, timestamp: 0, content: .data(transaction: 99, changes: "{}", changeset: [])))
        let refusal = assertRPCError(.internalError) { try b.catchUpWithCluster() }
        XCTAssertTrue(refusal?.message.contains("diverged") ?? false, refusal?.message ?? "")
        XCTAssertNotNil(b.divergenceError)
        assertRPCError(.internalError) { try b.insertTeam("Japan", zone: "Asia") }
        XCTAssertEqual(b.replicaPosition, 2, "nothing of the bad entry was applied")
        let read = assertRPCError(.internalError) { try b.count(FetchRequest(entity: "Team"), scope: .unrestricted) }
        XCTAssertTrue(read?.message.contains("rebuilding") ?? false, read?.message ?? "")
    }

    func testADataDirectoryIsALoneStoreOrAReplicaForLife() throws {
        let (lone, directory) = try makeStore()
        _ = lone
        assertRPCError(.invalidParams) {
            try Store(path: directory.appendingPathComponent("depot.sqlite").path, replication: MemoryLog())
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite").path
        _ = try Store(path: path, replication: MemoryLog())
        assertRPCError(.invalidParams) { try Store(path: path) }
    }

    func testASaveResentToAnotherReplicaIsAnsweredAsBeforeAndAppendsNothing() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        let save = StoreSave.Parameters(
            inserted: [
                InsertedObject(entity: "Team", tempId: "t", values: ["teamName": "France", "qualifyingZone": "Z"])
            ],
            saveId: "resent")
        let (first, _) = try a.save(save, writeScope: .unrestricted)
        // b has not caught up: its first try runs the save and the log refuses it; under the lock,
        // after applying a's entry, the lookup inside the write finds the id.
        let (again, transaction) = try b.save(save, writeScope: .unrestricted)
        XCTAssertEqual(again, first)
        XCTAssertNil(transaction)
        XCTAssertEqual(log.count, 2, "the model and the one save")
        XCTAssertEqual(log.lockedWrites, 1)
        XCTAssertEqual(try b.count(FetchRequest(entity: "Team"), scope: .unrestricted), 1)
        // Once at the head, b answers from its replica of the ids, without the lock.
        XCTAssertEqual(try b.save(save, writeScope: .unrestricted).0, first)
        XCTAssertEqual(log.lockedWrites, 1)
    }

    func testTheWritersPruneOfSaveIdsReachesEveryReplicaWhateverItsRetention() throws {
        let log = MemoryLog()
        let a = try replica(log, retention: .count(10))
        let b = try replica(log, retention: .forever)
        _ = try a.defineModel(testModel)
        try a.insertTeams(130, saveIds: "save")
        try b.catchUpWithCluster()
        XCTAssertNil(b.divergenceError)
        let ids = { (store: Store) in
            try store.read { db in try String.fetchAll(db, sql: "SELECT save_id FROM depot_save_id ORDER BY save_id") }
        }
        XCTAssertEqual(try ids(b), try ids(a), "every replica holds the same ids")
        XCTAssertLessThan(try ids(a).count, 20, "pruned with a's history")
        // b writes next, with its own retention, and a follows it without diverging.
        _ = try b.save(StoreSave.Parameters(saveId: "save 129"), writeScope: .unrestricted)
        _ = try b.insertTeam("Japan", zone: "Asia")
        try a.catchUpWithCluster()
        XCTAssertNil(a.divergenceError)
        XCTAssertEqual(try ids(b), try ids(a))
    }

    func testAReplicaComputesTheShadowColumnsOfFoldedAttributesItself() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        _ = try a.defineModel(testModel)
        _ = try a.insertTeam("Étoile Rouge", zone: "Europe")
        // Folding an attribute is a model change: b migrates itself from the log entry.
        var folded = testModel
        folded[0].attributes[0].folded = true
        _ = try a.defineModel(folded)
        _ = try a.insertTeam("ÉCOLE", zone: "Europe")
        _ = try a.batchInsert(
            BatchInsert.Parameters(entity: "Team", objects: [["teamName": "Crème", "qualifyingZone": "Asia"]]),
            writeScope: .unrestricted)
        _ = try a.batchUpdate(
            BatchUpdate.Parameters(entity: "Team", predicate: "teamName == 'ÉCOLE'", values: ["teamName": "Ecole Ü"]),
            readScope: .unrestricted, writeScope: .unrestricted)
        try b.catchUpWithCluster()
        XCTAssertNil(b.divergenceError, "the checksums leave the shadow columns out")
        let shadows = { (store: Store) in
            try store.read { db in
                try Row.fetchAll(db, sql: "SELECT teamName, \"teamName#folded\" FROM e_Team ORDER BY id").map {
                    [$0[0] as String, $0[1] as String]
                }
            }
        }
        XCTAssertEqual(try shadows(b), try shadows(a))
        XCTAssertEqual(try shadows(b).map { $0[1] }, ["etoile rouge", "ecole u", "creme"])
        let request = FetchRequest(entity: "Team", predicate: "teamName CONTAINS[cd] 'E'", resultType: .ids)
        XCTAssertEqual(try b.fetch(request, scope: .unrestricted).ids?.count, 3)
        XCTAssertEqual(try b.fetch(request, scope: .unrestricted).ids, try a.fetch(request, scope: .unrestricted).ids)
    }

    /// A migration of a defined model is a transaction on every replica (DESIGN.md §7, Across a
    /// migration): the next number, a history row with no changes, in each one's commit stream.
    func testAMigrationIsTheSameNumberedTransactionOnEveryReplica() throws {
        let log = MemoryLog()
        let (a, b) = (try replica(log), try replica(log))
        XCTAssertNil(try a.defineModel(testModel).transaction, "the first definition of an empty cluster")
        _ = try a.insertTeam("France", zone: "Europe")
        var migrated = testModel
        migrated[0].attributes.append(AttributeDescription(name: "stars", type: .integer, defaultValue: 2))
        let defined = try a.defineModel(migrated)
        XCTAssertEqual(defined.transaction, 2)
        XCTAssertNil(try a.defineModel(migrated).transaction, "an unchanged model is no transaction")
        XCTAssertEqual(a.takeCommittedTransactions().map(\.number), [1, 2])
        // b, behind the log, migrates under the lock after applying a's: the next number again.
        var again = migrated
        again[0].attributes.append(AttributeDescription(name: "note", type: .string, optional: true))
        XCTAssertEqual(try b.defineModel(again).transaction, 3)
        XCTAssertEqual(b.takeCommittedTransactions().map(\.number), [1, 2, 3])
        XCTAssertEqual(try b.insertTeam("Japan", zone: "Asia").isEmpty, false)
        try a.catchUpWithCluster()
        XCTAssertNil(a.divergenceError)
        XCTAssertEqual(a.takeCommittedTransactions().map(\.number), [3, 4])
        XCTAssertEqual(a.schema.version, b.schema.version)
        let history = try a.history(since: 0, limit: nil).transactions
        XCTAssertEqual(history.map(\.transaction), [1, 2, 3, 4])
        XCTAssertEqual(history.map(\.changes.isEmpty), [false, true, true, false])
        XCTAssertEqual(try b.history(since: 0, limit: nil).transactions, history)
    }

    private func replica(_ log: MemoryLog, retention: HistoryRetention = .count(100_000)) throws -> Store {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite").path
        return try Store(path: path, historyRetention: retention, replication: log)
    }
}

/// A cluster log in memory: one lock, entries in order.
private final class MemoryLog: StoreReplication {
    private struct State {
        var entries: [ReplicatedEntry] = []
        var locked = false
        var refuseCommit = false
        var lockedWrites = 0
        var readLimit = 0
    }

    private let state = Mutex(State())

    var count: Int { state.withLock { $0.entries.count } }
    var lockHeld: Bool { state.withLock { $0.locked } }
    var lockedWrites: Int { state.withLock { $0.lockedWrites } }

    func refuseNextCommit() { state.withLock { $0.refuseCommit = true } }

    /// Appends `entry` as the log's next, whatever it says.
    func appendUnchecked(_ entry: ReplicatedEntry) { state.withLock { $0.entries.append(entry) } }

    func beginWrite(after position: Int64, locked: Bool) throws(RPCError) -> [ReplicatedEntry] {
        state.withLock { state in
            guard locked else { return [] }
            precondition(!state.locked, "one write at a time")
            state.locked = true
            state.lockedWrites += 1
            return state.entries.filter { $0.number > position }
        }
    }

    func commitWrite(_ entries: [ReplicatedEntry], tables: ObjectTablesChange?) throws(RPCError) -> Bool {
        let outcome: Bool? = state.withLock { state in
            defer { state.locked = false }
            guard !state.refuseCommit else {
                state.refuseCommit = false
                return nil
            }
            guard entries.first?.number == Int64(state.entries.count) + 1 else { return false }
            state.entries += entries
            return true
        }
        guard let outcome else { throw .internalError("the log refused the commit") }
        return outcome
    }

    func abandonWrite() { state.withLock { $0.locked = false } }

    /// A smaller batch than the store asks for, to cut groups (0: as asked).
    var readLimit: Int {
        get { state.withLock { $0.readLimit } }
        set { state.withLock { $0.readLimit = newValue } }
    }

    func entries(after position: Int64, limit: Int) throws(RPCError) -> [ReplicatedEntry] {
        state.withLock { state in
            Array(state.entries.filter { $0.number > position }.prefix(state.readLimit > 0 ? state.readLimit : limit))
        }
    }

    func startFollowing(position: @escaping @Sendable () -> Int64, _ newEntries: @escaping @Sendable () -> Void) {}

    func stop() {}
}
