import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// A key's scope joined to a request's predicate as a tree (DESIGN.md §2, Row-level
/// scopes): for random predicates and random scopes, the scoped fetch is exactly
/// the request's matches that the scope lets through, and no request text, however
/// written, returns an object the scope excludes.
final class ScopeCombinationTests: XCTestCase {
    private func ids(_ store: Store, _ predicate: String?, scope: PredicateNode? = nil) throws -> Set<String> {
        let request = FetchRequest(entity: "Team", predicate: predicate, resultType: .ids)
        return Set(try store.fetch(request, scope: ReadScope(rules: scope.map { ["Team": $0] } ?? [:])).ids ?? [])
    }

    func testRandomPredicatesNeverWidenARandomScope() throws {
        var random = SeededGenerator(seed: 25)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-scope-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("d.sqlite").path)
        _ = try store.defineModel(PredicateTests.model)
        _ = try store.save(
            StoreSave.Parameters(inserted: PredicateFixture.differentialRows(&random)), writeScope: .unrestricted)

        var checked = 0
        for _ in 0..<400 {
            let scopeText = PredicateFixture.randomPredicate(depth: 2, &random)
            let requestText = PredicateFixture.randomPredicate(depth: 3, &random)
            let scope = try PredicateParser.parse(scopeText)
            let inScope = try ids(store, scopeText)
            let matching = try ids(store, requestText)
            let scoped = try ids(store, requestText, scope: scope)
            XCTAssertEqual(scoped, matching.intersection(inScope), "\(requestText) under \(scopeText)")
            // The count and the objects read through the same condition.
            let count = FetchRequest(entity: "Team", predicate: requestText)
            XCTAssertEqual(
                try store.count(count, scope: ReadScope(rules: ["Team": scope])), scoped.count,
                "\(requestText) under \(scopeText): count")
            checked += 1
        }
        XCTAssertEqual(checked, 400)

        // Texts written to escape a scope joined as text: each either fails to parse or stays inside.
        let scope = try PredicateParser.parse("wins > 2")
        let inScope = try ids(store, "wins > 2")
        XCTAssertFalse(inScope.isEmpty)
        for attempt in [
            "wins > 0) OR (1 == 1", "TRUEPREDICATE OR TRUEPREDICATE", "wins < 100 OR TRUEPREDICATE",
            "NOT (FALSEPREDICATE)", "1 == 1) OR (wins > 2", ") OR TRUEPREDICATE OR (", "wins > 2 OR wins <= 2",
            "teamName LIKE '*' OR teamName == nil", "TRUEPREDICATE --", "TRUEPREDICATE; DELETE FROM e_Team",
        ] {
            do {
                let scoped = try ids(store, attempt, scope: scope)
                XCTAssertTrue(scoped.isSubset(of: inScope), "'\(attempt)' widened the scope")
            } catch let error as RPCError {
                XCTAssertTrue(
                    [ErrorCode.predicateSyntax, .invalidParams].contains(error.code), "'\(attempt)': \(error)")
            }
        }
        XCTAssertEqual(try ids(store, nil).count, 40, "nothing was written by the attempts")
    }
}
