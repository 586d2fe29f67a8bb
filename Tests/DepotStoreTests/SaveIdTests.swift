import DepotProtocol
import Dispatch
import Foundation
import GRDB
import Synchronization
import XCTest

@testable import DepotStore

/// `saveId` on `store/save` (DESIGN.md §6): a committed save resent with its id is answered
/// with its first answer and not applied again, for as long as history keeps its transaction.
final class SaveIdTests: XCTestCase {
    private func insertFrance(_ saveId: String?) -> StoreSave.Parameters {
        StoreSave.Parameters(
            inserted: [
                InsertedObject(entity: "Team", tempId: "t", values: ["teamName": "France", "qualifyingZone": "UEFA"]),
                InsertedObject(entity: "Player", tempId: "p", values: ["name": "Kylian", "team": "t"]),
            ], author: "replay", saveId: saveId)
    }

    func testAResentSaveGetsTheFirstAnswerAndIsNotAppliedAgain() throws {
        let (store, _) = try makeStore()
        let (first, committed) = try store.save(insertFrance("save-1"), writeScope: .unrestricted)
        XCTAssertNotNil(committed)
        XCTAssertEqual(first.ids.count, 2)
        let (again, transaction) = try store.save(insertFrance("save-1"), writeScope: .unrestricted)
        XCTAssertEqual(again, first, "same ids, versions and transaction")
        XCTAssertNil(transaction, "nothing was committed, so nothing is published")
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team"), scope: .unrestricted), 1)
        XCTAssertEqual(try store.count(FetchRequest(entity: "Player"), scope: .unrestricted), 1)
        XCTAssertEqual(try store.latestTransaction(), first.transaction)
        // The id names the save, whatever the resent params say (the client resends the same save).
        let (other, _) = try store.save(StoreSave.Parameters(saveId: "save-1"), writeScope: .unrestricted)
        XCTAssertEqual(other, first)
        // Without a saveId, or with another one, the same changes are a new save.
        assertRPCError(.uniqueConstraint) { try store.save(insertFrance(nil), writeScope: .unrestricted) }
        assertRPCError(.uniqueConstraint) { try store.save(insertFrance("save-2"), writeScope: .unrestricted) }
    }

    func testTheAnswerOutlivesTheStoreBeingClosedAndOpenedAgain() throws {
        let (store, directory) = try makeStore()
        let (first, _) = try store.save(insertFrance("survives"), writeScope: .unrestricted)
        let path = directory.appendingPathComponent("depot.sqlite").path
        store.checkpoint()
        let reopened = try Store(path: path)
        let (again, transaction) = try reopened.save(insertFrance("survives"), writeScope: .unrestricted)
        XCTAssertEqual(again, first)
        XCTAssertNil(transaction)
        XCTAssertEqual(try reopened.count(FetchRequest(entity: "Team"), scope: .unrestricted), 1)
    }

    func testAFailedSaveIsNotRememberedAndRunsAgainWhenResent() throws {
        let (store, _) = try makeStore()
        let france = try store.insertTeam("France", zone: "UEFA")
        assertRPCError(.uniqueConstraint) { try store.save(insertFrance("retry"), writeScope: .unrestricted) }
        assertRPCError(.validationFailed) {
            try store.save(
                StoreSave.Parameters(inserted: [InsertedObject(entity: "Team", values: [:])], saveId: "invalid"),
                writeScope: .unrestricted)
        }
        XCTAssertEqual(try rememberedIds(store), 0)
        _ = try store.save(StoreSave.Parameters(deleted: [DeletedObject(id: france)]), writeScope: .unrestricted)
        let (result, transaction) = try store.save(insertFrance("retry"), writeScope: .unrestricted)
        XCTAssertNotNil(transaction, "the resent save ran, and committed this time")
        XCTAssertEqual(result.transaction, try store.latestTransaction())
        XCTAssertEqual(try rememberedIds(store), 1)
    }

    func testASaveThatChangesNothingIsNotRemembered() throws {
        let (store, _) = try makeStore()
        let france = try store.insertTeam("France", zone: "UEFA")
        let (result, transaction) = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: france, values: ["wins": 0])], saveId: "no-op"),
            writeScope: .unrestricted)
        XCTAssertNil(transaction)
        XCTAssertEqual(result.transaction, 0)
        XCTAssertEqual(try rememberedIds(store), 0, "nothing committed, nothing to remember")
    }

    func testBadSaveIdsAreRefusedNamingTheFieldAndWriteNothing() throws {
        let (store, _) = try makeStore()
        for bad in ["", String(repeating: "x", count: 129), String(repeating: "é", count: 129)] {
            let error = assertRPCError(.invalidParams) { try store.save(insertFrance(bad), writeScope: .unrestricted) }
            XCTAssertEqual(error?.data?["field"], "params.saveId", "\(bad.count) characters")
            XCTAssertTrue(error?.message.contains("129") == true || bad.isEmpty, error?.message ?? "")
        }
        XCTAssertEqual(try store.latestTransaction(), 0)
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team"), scope: .unrestricted), 0)
        // 128 characters, counted as Unicode scalars like JSON Schema's maxLength, are fine.
        let longest = String(repeating: "é", count: 128)
        let (first, _) = try store.save(insertFrance(longest), writeScope: .unrestricted)
        XCTAssertEqual(try store.save(insertFrance(longest), writeScope: .unrestricted).0, first)
    }

    func testTwoSavesWithOneSaveIdInAGroupApplyOnce() throws {
        let (store, _) = try makeStore()
        var answers: [(StoreSave.Result, CommittedTransaction?)] = []
        try store.writeGroup { group in
            for _ in 0..<2 {
                if let answer = try? store.save(insertFrance("grouped"), in: group, writeScope: .unrestricted) {
                    answers.append(answer)
                }
            }
            if let answer = try? store.save(
                StoreSave.Parameters(deleted: [], saveId: "grouped"), in: group, writeScope: .unrestricted)
            {
                answers.append(answer)
            }
        }
        XCTAssertEqual(answers.count, 3)
        XCTAssertNotNil(answers[0].1)
        XCTAssertEqual(answers[1].0, answers[0].0, "the second gets the first's answer")
        XCTAssertNil(answers[1].1)
        XCTAssertEqual(answers[2].0, answers[0].0)
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team"), scope: .unrestricted), 1)
        XCTAssertEqual(try store.latestTransaction(), 1)
    }

    func testConcurrentSavesWithOneSaveIdApplyOnceAndAllGetItsAnswer() throws {
        let (store, _) = try makeStore()
        let answers = Mutex<[StoreSave.Result]>([])
        let committed = Atomic<Int>(0)
        let params = insertFrance("raced")
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            guard let (answer, transaction) = try? store.save(params, writeScope: .unrestricted) else { return }
            if transaction != nil { committed.add(1, ordering: .relaxed) }
            answers.withLock { $0.append(answer) }
        }
        let all = answers.withLock { $0 }
        XCTAssertEqual(all.count, 8, "every client got an answer")
        XCTAssertEqual(Set(all).count, 1, "the same answer")
        XCTAssertEqual(committed.load(ordering: .relaxed), 1, "one of them applied it")
        XCTAssertEqual(try store.count(FetchRequest(entity: "Player"), scope: .unrestricted), 1)
    }

    func testIdsAreForgottenWithTheHistoryThatHeldTheirTransactions() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-saveid-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("depot.sqlite").path, historyRetention: .count(10))
        _ = try store.defineModel(testModel)
        try store.insertTeams(130, saveIds: "save")
        let oldest = try store.history(since: 0, limit: nil).oldest
        XCTAssertGreaterThan(oldest, 100, "history was pruned")
        let kept = try store.read { db in
            try Int64.fetchAll(db, sql: "SELECT transaction_id FROM depot_save_id ORDER BY transaction_id")
        }
        XCTAssertEqual(kept.first, oldest, "ids of pruned transactions are gone, the others stay")
        XCTAssertEqual(kept.last, 130)
        // The newest is still remembered; the first is forgotten, so resending it runs it again.
        let (newest, unapplied) = try store.save(StoreSave.Parameters(saveId: "save 129"), writeScope: .unrestricted)
        XCTAssertEqual(newest.transaction, 130)
        XCTAssertNil(unapplied)
        assertRPCError(.uniqueConstraint) {
            try store.save(
                StoreSave.Parameters(
                    inserted: [InsertedObject(entity: "Team", values: ["teamName": "Team 0", "qualifyingZone": "Z"])],
                    saveId: "save 0"), writeScope: .unrestricted)
        }
    }

    private func rememberedIds(_ store: Store) throws -> Int {
        try store.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM depot_save_id") ?? 0 }
    }
}
