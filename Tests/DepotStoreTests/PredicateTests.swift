import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// The predicate language over a small seeded model with to-one and to-many
/// relationships and non-ASCII strings: each case lists the teams that match.
final class PredicateTests: XCTestCase {
    static let model = PredicateFixture.model

    private var seeded: Store?
    /// The model the store is defined with (``PredicateFixture/foldedModel`` for the folded runs).
    private var definedModel = PredicateTests.model

    /// Teams A…F (rows 1…6) with players, countries and awkward values.
    func store() throws -> Store {
        if let store = seeded { return store }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-predicates-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("p.sqlite").path)
        _ = try store.defineModel(definedModel)
        try PredicateFixture.seedCaseTable(
            save: { _ = try store.save($0, writeScope: .unrestricted) },
            fetchIDs: { try store.fetch($0, scope: .unrestricted).ids ?? [] })
        seeded = store
        return store
    }

    func matches(_ predicate: String, _ arguments: JSONValue? = nil, file: StaticString = #filePath, line: UInt = #line)
        throws -> String
    {
        let store = try store()
        let result = try store.fetch(
            FetchRequest(
                entity: "Team", predicate: predicate, arguments: arguments, sort: [SortDescriptor(key: "teamName")],
                properties: ["teamName"]), scope: .unrestricted)
        return (result.objects ?? []).compactMap { PredicateFixture.teamLetters[$0["teamName"]?.stringValue ?? ""] }
            .sorted().joined()
    }

    /// (predicate, arguments, matching teams): the shared table (DepotPostgresTests runs it too).
    static let cases = PredicateFixture.cases

    /// The same cases through the in-memory evaluator.
    func evaluated(_ predicate: String, _ arguments: JSONValue?) throws -> String {
        let store = try store()
        let (evaluator, teams) = try PredicateFixture.evaluator {
            try store.fetch($0, scope: .unrestricted).objects ?? []
        }
        let node = try PredicateParser.parse(predicate, arguments: arguments)
        return try teams.filter { try evaluator.evaluate(node, on: $0.objectValue!, entity: "Team") }
            .compactMap { PredicateFixture.teamLetters[$0["teamName"]?.stringValue ?? ""] }.sorted().joined()
    }

    func testCaseTable() throws {
        try checkCaseTable()
    }

    /// The same table with every string attribute `folded`: the `[cd]` cases read the shadow columns
    /// and must match exactly the same teams.
    func testCaseTableFolded() throws {
        definedModel = PredicateFixture.foldedModel
        try checkCaseTable()
        XCTAssertGreaterThanOrEqual(Self.cases.filter { $0.0.contains("[cd]") }.count, 10)
    }

    private func checkCaseTable() throws {
        var failures: [String] = []
        for (predicate, arguments, expected) in Self.cases {
            do {
                let got = try matches(predicate, arguments)
                if got != expected { failures.append("\(predicate): expected \(expected), got \(got)") }
                let inMemory = try evaluated(predicate, arguments)
                if inMemory != expected {
                    failures.append("\(predicate) in memory: expected \(expected), got \(inMemory)")
                }
            } catch {
                failures.append("\(predicate): \(error)")
            }
        }
        XCTAssertGreaterThanOrEqual(Self.cases.count, 150)
        XCTAssertTrue(
            failures.isEmpty,
            "\(failures.count) of \(Self.cases.count) cases failed:\n" + failures.joined(separator: "\n"))
    }

    func testErrors() throws {
        _ = try store()
        let syntax: [(String, Int, String)] = [
            ("wins ==", 7, "a key path or a value"), ("wins 3", 5, "a comparison operator"), ("(wins == 3", 10, "')'"),
            ("wins == 'abc", 8, "a closing '"), ("wins == 3 AND", 13, "a key path or a value"),
            ("wins == 3 wins", 10, "AND, OR"),
            ("wins BETWEEN {1}", 0, "BETWEEN {lower, upper}"), ("teamName CONTAINS[x] 'a'", 18, "c, d or cd"),
            ("wins == ^", 8, "a key"),
            ("AND == 3", 0, "a key path or a value"), ("$", 0, "a variable name"), ("players.@foo > 1", 9, "@count"),
        ]
        for (predicate, position, expected) in syntax {
            let error = assertRPCError(.predicateSyntax) { try self.matches(predicate) }
            XCTAssertEqual(error?.data?["position"], .int(Int64(position)), predicate)
            XCTAssertTrue(
                error?.data?["expected"]?.stringValue?.contains(expected) == true,
                "\(predicate): \(error?.data?["expected"] ?? nil)")
            XCTAssertTrue(error?.message.contains("^") == true, "the message points at the position")
        }
        let invalid: [(String, JSONValue?, String)] = [
            ("color == 'red'", nil, "color"), ("country.flag == 1", nil, "flag"), ("wins < 'three'", nil, "mismatch"),
            ("teamName < 3", nil, "mismatch"), ("wins CONTAINS 'x'", nil, "CONTAINS compares strings"),
            ("zone == $missing", nil, "$missing"),
            ("zone == %@", [], "more format arguments"), ("zone == %@", ["a", "b"], "uses 1 of the 2"),
            ("%K == 1", ["id; DROP TABLE e_Team"], "DROP"),
            ("%K == 1", [3], "%K needs a key path"), ("ANY zone == 'x'", nil, "to-many"),
            ("players == 'x'", nil, "Player"),
            ("active > NO", nil, "cannot order"), ("teamName MATCHES '('", nil, "regular expression"),
            ("founded > 'yesterday'", nil, "ISO 8601"),
            ("country == 'Team/1'", nil, "Country"), ("zone == $z", ["z"], "arguments"),
            ("id.wins == 1", nil, "id has no key 'wins'"), ("id == 'Country/1'", nil, "Team"),
            ("wins IN 'abc'", nil, "substring test"), ("3 IN 'a3'", nil, "substring test"),
            ("country IN 'France'", nil, "substring test"), ("zone IN 3", nil, "or a string"),
            ("zone IN $z", ["z": nil], "or a string"),
        ]
        for (predicate, arguments, fragment) in invalid {
            let error = assertRPCError(.invalidParams) { try self.matches(predicate, arguments) }
            XCTAssertTrue(error?.message.contains(fragment) == true, "\(predicate): \(error?.message ?? "")")
        }
        // The store is intact after hostile input.
        XCTAssertEqual(try matches("TRUEPREDICATE"), "ABCDEF")
    }

    func testDepthIsBounded() throws {
        _ = try store()
        let deep = String(repeating: "(", count: 5000) + "wins == 3" + String(repeating: ")", count: 5000)
        assertRPCError(.predicateSyntax) { try self.matches(deep) }
        let nots = String(repeating: "NOT ", count: 5000) + "wins == 3"
        assertRPCError(.predicateSyntax) { try self.matches(nots) }
        let fine = String(repeating: "(", count: 50) + "wins == 3" + String(repeating: ")", count: 50)
        XCTAssertEqual(try matches(fine), "AF")
    }

    /// Random and mutated strings: always an AST or -32014/-32602, never a crash or hang.
    func testFuzzNeverCrashes() throws {
        let store = try store()
        let schema = store.schema
        let entity = try XCTUnwrap(schema.entity(named: "Team"))
        var generator = SystemRandomNumberGenerator()
        let seeds = Self.cases.map(\.0)
        let alphabet = Array("abwinszone ()'\"{}[]=<>!&|.,@$%*?#0123456789-cdANDORNOTINANYALL\\é")
        for round in 0..<4000 {
            var text = Array(seeds.randomElement(using: &generator)!)
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let position = Int.random(in: 0...text.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: text.insert(alphabet.randomElement(using: &generator)!, at: position)
                case 1 where position < text.count: text.remove(at: position)
                default: text.insert(contentsOf: Array(seeds.randomElement(using: &generator)!.prefix(8)), at: position)
                }
            }
            if round % 4 == 0 {
                text = (0..<Int.random(in: 0..<30, using: &generator)).map { _ in
                    alphabet.randomElement(using: &generator)!
                }
            }
            do {
                _ = try PredicateCompilation.whereClause(
                    predicate: String(text), arguments: ["x": 1], entity: entity, schema: schema)
            } catch {
                XCTAssertTrue([.predicateSyntax, .invalidParams].contains(error.code), "\(String(text)): \(error)")
            }
        }
    }
}
