import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// `ObjectContext.save()` and `saveId` (DESIGN.md §6) against real daemons: every save carries a
/// fresh one, and a save whose link dropped while it was in flight is resent with it.
final class ClientSaveIdTests: XCTestCase {
    private static let notes = EntityDescription(
        name: "Note", attributes: [AttributeDescription(name: "title", type: .string)],
        uniquenessConstraints: [["title"]])

    func testEachContextSaveCarriesAFreshSaveIdTheDaemonRemembers() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        _ = try await connection.call(ModelDefine.self, .init(entities: [Self.notes]))
        let context = ObjectContext(connection: connection)
        let note = context.insert(entity: "Note", values: ["title": "first"])
        let first = try await context.save()
        let saveId = try XCTUnwrap(first.saveId)
        XCTAssertNotNil(UUID(uuidString: saveId), "a UUID")
        // Resent by hand: the daemon answers as before and applies nothing.
        let resent = try await connection.call(StoreSave.self, .init(saveId: saveId))
        XCTAssertEqual(resent.ids, first.ids)
        XCTAssertEqual(resent.transaction, first.transaction)
        let id = try XCTUnwrap(first.ids[note.id])
        context.set("second", forKey: "title", on: try XCTUnwrap(context.registeredObject(withID: id)))
        let second = try await context.save()
        XCTAssertNotEqual(second.saveId, saveId, "every save has its own")
        XCTAssertGreaterThan(second.transaction, first.transaction)
        let nothing = try await context.save()
        XCTAssertNil(nothing.saveId, "nothing to save, nothing sent")
        let stored = try await connection.call(StoreCount.self, FetchRequest(entity: "Note")).count
        XCTAssertEqual(stored, 1)
    }

    /// The daemon is killed (-9) while a save is in flight and started again on the same endpoint:
    /// whether the save had committed or not, it is applied exactly once, or not at all with a
    /// dropped-link error; never twice, never refused as its own duplicate.
    func testASaveInFlightWhenTheDaemonDiesIsAppliedAtMostOnce() async throws {
        let endpoint = "tcp://127.0.0.1:\(try ClientSupport.freePort())"
        let first = try Daemon(heartbeat: 1, listen: endpoint)
        let connection = try await first.connect()
        _ = try await connection.call(ModelDefine.self, .init(entities: [Self.notes]))
        let context = ObjectContext(connection: connection)
        let count = 2_000
        for index in 0..<count { _ = context.insert(entity: "Note", values: ["title": .string("note \(index)")]) }
        let save = Task { () -> Result<ObjectContext.SaveResult, DepotClientError> in
            do throws(DepotClientError) {
                return .success(try await context.save())
            } catch {
                return .failure(error)
            }
        }
        try await Task.sleep(for: .milliseconds(30))
        first.kill()
        let second = try Daemon(dataDirectory: first.dataDirectory, heartbeat: 1, listen: endpoint)
        defer {
            second.stop()
            second.removeData()
        }
        let outcome = await save.value
        let checker = try await second.connect(name: "checker")
        let stored = try await checker.call(StoreCount.self, FetchRequest(entity: "Note")).count
        switch outcome {
        case .success(let result):
            XCTAssertEqual(result.ids.count, count)
            XCTAssertEqual(stored, count, "applied exactly once")
        case .failure(let error):
            XCTAssertNil(error.rpcError, "the daemon refused the save: \(error)")
            XCTAssertTrue(stored == 0 || stored == count, "all or nothing, once: \(stored)")
        }
    }
}
