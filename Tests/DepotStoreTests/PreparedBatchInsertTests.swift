import DepotProtocol
import Foundation
import XCTest

@testable import DepotStore

/// A batch checked and converted before the writer (``Store/prepareBatchInsert(_:)``)
/// inserts and fails exactly as one converted in the write, and is converted
/// again when the model changed in between.
final class PreparedBatchInsertTests: XCTestCase {
    private func params(_ objects: [[String: JSONValue]]) -> BatchInsert.Parameters {
        BatchInsert.Parameters(entity: "Team", objects: objects)
    }

    func testAPreparedBatchInsertsWhatAPlainOneDoes() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let objects: [[String: JSONValue]] = (0..<50).map {
            ["teamName": .string("T\($0)"), "qualifyingZone": .string("Z\($0 % 4)"), "wins": .int(Int64($0))]
        }
        let (result, transaction) = try store.batchInsert(
            try store.prepareBatchInsert(params(objects)), writeScope: .unrestricted)
        XCTAssertEqual(result.inserted, 50)
        XCTAssertEqual(transaction?.changes["Team"]?.inserted.count, 50)
        let fetched =
            try store.fetch(FetchRequest(entity: "Team", sort: [SortDescriptor(key: "wins")]), scope: .unrestricted)
            .objects ?? []
        XCTAssertEqual(fetched.map { $0["teamName"] }, objects.map { $0["teamName"] })
        XCTAssertEqual(fetched.last?["wins"], 49)
    }

    func testProblemsAreTheSameAndNothingCommits() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let objects: [[String: JSONValue]] = [
            ["teamName": "A", "qualifyingZone": "Z"], ["teamName": 3, "qualifyingZone": "Z"], ["nope": 1],
            ["teamName": "B", "qualifyingZone": "Z"],
        ]
        var plain: RPCError?
        var prepared: RPCError?
        do { _ = try store.batchInsert(params(objects), writeScope: .unrestricted) } catch { plain = error }
        do { _ = try store.batchInsert(try store.prepareBatchInsert(params(objects)), writeScope: .unrestricted) } catch
        { prepared = error }
        XCTAssertEqual(plain?.code, .validationFailed)
        XCTAssertEqual(prepared?.code, plain?.code)
        XCTAssertEqual(prepared?.message, plain?.message)
        XCTAssertEqual(prepared?.data, plain?.data)
        XCTAssertEqual(try store.count(FetchRequest(entity: "Team"), scope: .unrestricted), 0)
    }

    func testAModelChangedSinceThePreparationConvertsAgain() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Prepared while `rank` is unknown: a problem then, a value once the model has it.
        let batch = try store.prepareBatchInsert(params([["teamName": "A", "qualifyingZone": "Z", "rank": 7]]))
        var model = testModel
        model[0].attributes.append(AttributeDescription(name: "rank", type: .integer, optional: true))
        _ = try store.defineModel(model)
        let (result, _) = try store.batchInsert(batch, writeScope: .unrestricted)
        XCTAssertEqual(result.inserted, 1)
        XCTAssertEqual(try store.fetch(FetchRequest(entity: "Team"), scope: .unrestricted).objects?.first?["rank"], 7)
    }
}
