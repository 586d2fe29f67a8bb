import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// The grouped SQL (`GroupedFetchPlan`) and the in-memory `GroupedEvaluator`
/// agree on random data for random grouped requests: groupBy keys of every
/// type and through a to-one, every aggregate, having, sorts, limit and offset.
final class GroupedDifferentialTests: XCTestCase {
    func testSQLAndGroupedEvaluatorAgree() throws {
        var random = SeededGenerator(seed: 2411)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-grouped-diff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("g.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        _ = try store.save(
            StoreSave.Parameters(inserted: PredicateFixture.differentialRows(&random)), writeScope: .unrestricted)
        let (evaluator, teams) = try PredicateFixture.evaluator {
            try store.fetch($0, scope: .unrestricted).objects ?? []
        }
        let grouped = GroupedEvaluator(model: PredicateFixture.model, evaluator: evaluator)
        let objects = teams.compactMap(\.objectValue)

        var checked = 0
        var nonEmpty = 0
        var disagreements: [String] = []
        for _ in 0..<1500 {
            let request = PredicateFixture.randomGroupedRequest(&random)
            let described = String(decoding: JSONWriter.encode(try JSONCoding.encode(request)), as: UTF8.self)
            let sql: [JSONValue]
            let counted: Int
            do {
                sql = try store.fetch(request, scope: .unrestricted).objects ?? []
                counted = try store.count(request, scope: .unrestricted)
            } catch {
                disagreements.append("\(described): SQL side failed: \(error)")
                continue
            }
            let memory = try grouped.evaluate(request, objects: objects).map { JSONValue.object($0) }
            checked += 1
            if !sql.isEmpty { nonEmpty += 1 }
            if let difference = PredicateFixture.groupsDisagreement(sql, memory) {
                disagreements.append("\(described): \(difference)")
            }
            if counted != sql.count {
                disagreements.append("\(described): store/count \(counted), fetched \(sql.count)")
            }
        }
        XCTAssertEqual(checked, 1500)
        XCTAssertGreaterThan(nonEmpty, 700, "too few requests had groups to compare")
        XCTAssertTrue(
            disagreements.isEmpty,
            "\(disagreements.count) disagreements:\n" + disagreements.prefix(10).joined(separator: "\n"))
    }
}
