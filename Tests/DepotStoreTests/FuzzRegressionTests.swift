import Foundation
import XCTest

@testable import DepotProtocol
@testable import DepotStore

/// Inputs the fuzz targets (`Fuzz/`) found, kept as regression tests.
final class FuzzRegressionTests: XCTestCase {
    /// FuzzPredicate with look-alike text: `BEGINSWITH '*\u{301}'` matched every name with a
    /// combining accent in SQL (the literal's `*` went to GLOB unescaped: escaping walked
    /// `Character`s, and `*` with the mark is one) while the evaluator matched none. The
    /// literal is escaped scalar by scalar now; so is a LIKE pattern.
    func testAStarBeforeACombiningMarkIsLiteralInBeginsWithAndLike() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try store.save(
            StoreSave.Parameters(
                inserted: ["jose\u{301}", "*\u{301}x", "e\u{301}", "*"].map {
                    InsertedObject(entity: "Team", values: ["teamName": .string($0), "qualifyingZone": "x"])
                }), writeScope: .unrestricted)
        for (predicate, expected) in [
            ("teamName BEGINSWITH '*\u{301}'", ["*\u{301}x"]), ("teamName BEGINSWITH[c] '*\u{301}'", ["*\u{301}x"]),
            ("teamName ENDSWITH '*\u{301}'", []), ("teamName LIKE '\\\\*\u{301}x'", ["*\u{301}x"]),
            ("teamName LIKE '*\u{301}'", ["jose\u{301}", "e\u{301}"]),
        ] {
            let names = try store.fetch(FetchRequest(entity: "Team", predicate: predicate), scope: .unrestricted).objects?.compactMap {
                $0["teamName"]?.stringValue
            }
            XCTAssertEqual(
                Set((names ?? []).map { Array($0.utf8) }), Set(expected.map { Array($0.utf8) }), predicate)
        }
    }

    /// FuzzPredicate: 53 `!` before a comparison compiled to SQL that overflowed
    /// SQLite's parser stack (-32603 "parser stack overflow") while the evaluator
    /// answered. Nesting is now bounded in the parser, so both refuse deep input
    /// with -32014, and the deepest accepted nesting runs in SQL.
    func testDeepNotNestingIsRefusedByTheParserAndTheDeepestAcceptedRuns() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let deepest = String(repeating: "!", count: PredicateParser.maximumNegationDepth) + "wins == 11"
        XCTAssertEqual(
            try store.fetch(FetchRequest(entity: "Team", predicate: deepest, resultType: .count), scope: .unrestricted)
                .count, 0)
        let nested =
            String(repeating: "NOT (", count: PredicateParser.maximumNegationDepth) + "wins == 11"
            + String(repeating: ")", count: PredicateParser.maximumNegationDepth)
        XCTAssertNoThrow(
            try store.fetch(FetchRequest(entity: "Team", predicate: nested, resultType: .count), scope: .unrestricted))
        for text in [
            String(repeating: "!", count: 53) + "founded == 11",
            String(repeating: "NOT (", count: 40) + "wins == 1" + String(repeating: ")", count: 40),
        ] {
            XCTAssertThrowsError(try store.fetch(FetchRequest(entity: "Team", predicate: text), scope: .unrestricted)) {
                error in
                XCTAssertEqual((error as? RPCError)?.code, .predicateSyntax, "\(error)")
            }
            XCTAssertThrowsError(try PredicateParser.parse(text))
        }
    }

    /// FuzzPredicate: `ANY {{{{…` a thousand lists deep overflowed the parser's
    /// stack (the daemon would crash). Lists count towards the nesting bound.
    func testDeeplyNestedListsAreRefusedNotOverflowed() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let deep = "ANY " + String(repeating: "{", count: 5_000)
        XCTAssertThrowsError(try PredicateParser.parse(deep)) { error in
            XCTAssertEqual((error as? RPCError)?.code, .predicateSyntax, "\(error)")
            XCTAssertTrue((error as? RPCError)?.message.contains("less nesting") == true, "\(error)")
        }
        let depth = PredicateParser.maximumDepth - 1
        let accepted =
            "wins IN " + String(repeating: "{", count: depth) + "1" + String(repeating: "}", count: depth)
        XCTAssertNoThrow(try PredicateParser.parse(accepted))
        XCTAssertThrowsError(try store.fetch(FetchRequest(entity: "Team", predicate: deep), scope: .unrestricted))
    }

    /// FuzzPredicate: `LIKE 'Zebr***…***'` took the in-memory evaluator
    /// exponential time (it recursed at every `*`); it now matches in
    /// O(pattern × text) and still agrees with SQLite's GLOB.
    func testManyStarsInALikePatternMatchLikeSQLite() throws {
        let stars = String(repeating: "*", count: 60)
        let text = Array(("Zebr" + String(repeating: "a", count: 80) + "!").unicodeScalars)
        for (pattern, expected) in [
            ("Zebr\(stars)!", true), ("Zebr\(stars)?", true), ("Zebr\(stars)b\(stars)x", false),
            ("\(stars)a\(stars)a\(stars)!", true), ("Zebr\(stars)[*]", false), ("*[!]", true), ("?ebr*", true),
            ("Zebr", false), ("", false),
        ] {
            XCTAssertEqual(
                PredicateEvaluator.glob(ArraySlice(Array(pattern.unicodeScalars)), ArraySlice(text)), expected, pattern)
        }
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        let predicate = "teamName LIKE 'Zebr\(stars)[[[[['"
        XCTAssertEqual(
            try store.fetch(
                FetchRequest(entity: "Team", predicate: predicate, resultType: .count), scope: .unrestricted
            ).count, 0)
    }

    /// FuzzPredicate: `teamName IN 'Zeb\0ra'` (a substring test) bound its
    /// literal, of no declared type, as text cut at the U+0000 the `\0` escape
    /// made; SQL and the evaluator then disagreed. Refused like a NUL anywhere else.
    func testANulInAnUntypedLiteralIsRefused() throws {
        let (store, directory) = try makeStore()
        defer { try? FileManager.default.removeItem(at: directory) }
        for predicate in [#"teamName IN 'Zeb\0ra'"#, #"'Zeb\0ra' IN teamName"#, #"'a\0' == 'a'"#] {
            XCTAssertThrowsError(
                try store.fetch(FetchRequest(entity: "Team", predicate: predicate), scope: .unrestricted)
            ) { error in
                XCTAssertEqual((error as? RPCError)?.code, .invalidParams, predicate)
                XCTAssertTrue((error as? RPCError)?.message.contains("U+0000") == true, "\(error)")
            }
        }
    }
}
