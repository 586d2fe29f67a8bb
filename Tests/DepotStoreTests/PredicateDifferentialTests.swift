import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// The SQL compiled from a predicate and the in-memory evaluator agree on
/// random data for thousands of random well-typed predicates; so does a store
/// whose string attributes are `folded` (its `[cd]` comparisons read shadow columns).
/// The data and the predicates hold look-alike text (``LookAlikeText``): both sides
/// compare it by bytes, and only `[c]`/`[d]` fold.
final class PredicateDifferentialTests: XCTestCase {
    func testSQLAndEvaluatorAgree() throws {
        var random = SeededGenerator(seed: 2026)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-diff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("d.sqlite").path)
        _ = try store.defineModel(PredicateTests.model)
        let foldedStore = try Store(path: directory.appendingPathComponent("folded.sqlite").path)
        _ = try foldedStore.defineModel(PredicateFixture.foldedModel)

        let inserted = PredicateFixture.differentialRows(&random)
        _ = try store.save(StoreSave.Parameters(inserted: inserted), writeScope: .unrestricted)
        _ = try foldedStore.save(StoreSave.Parameters(inserted: inserted), writeScope: .unrestricted)

        // The object graph the evaluator reads.
        let (evaluator, teams) = try PredicateFixture.evaluator {
            try store.fetch($0, scope: .unrestricted).objects ?? []
        }

        var checked = 0
        var foldedChecked = 0
        var lookAlikeChecked = 0
        var disagreements: [String] = []
        for _ in 0..<2500 {
            let predicate = PredicateFixture.randomPredicate(depth: 3, &random)
            let node: PredicateNode
            let sqlIDs: Set<String>
            let foldedIDs: Set<String>
            do {
                node = try PredicateParser.parse(predicate)
                let request = FetchRequest(entity: "Team", predicate: predicate, resultType: .ids)
                sqlIDs = Set(try store.fetch(request, scope: .unrestricted).ids ?? [])
                foldedIDs = Set(try foldedStore.fetch(request, scope: .unrestricted).ids ?? [])
            } catch {
                disagreements.append("\(predicate): SQL side failed: \(error)")
                continue
            }
            let memoryIDs = try PredicateFixture.matchingIDs(node, in: teams, evaluator: evaluator)
            checked += 1
            if let line = PredicateFixture.disagreement(predicate, "SQL", ids: sqlIDs, inMemory: memoryIDs) {
                disagreements.append(line)
            }
            if predicate.contains("[cd]") { foldedChecked += 1 }
            // A combining mark, the Ångström or Kelvin sign, or the ﬁ ligature.
            if predicate.unicodeScalars.contains(where: { [0x301, 0x30A, 0x212B, 0x212A, 0xFB01].contains($0.value) }) {
                lookAlikeChecked += 1
            }
            if let line = PredicateFixture.disagreement(predicate, "folded SQL", ids: foldedIDs, inMemory: memoryIDs) {
                disagreements.append(line)
            }
        }
        XCTAssertEqual(checked, 2500)
        XCTAssertGreaterThan(foldedChecked, 300, "enough [cd] comparisons read the shadow columns")
        XCTAssertGreaterThan(lookAlikeChecked, 150, "enough predicates compare look-alike text")
        XCTAssertTrue(
            disagreements.isEmpty,
            "\(disagreements.count) disagreements:\n" + disagreements.prefix(15).joined(separator: "\n"))
    }
}
