import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// The dialect seam without a server: SQLite stays the default, PostgreSQL SQL is spelled for
/// PostgreSQL, and the tables the PostgreSQL helpers are generated from agree with ICU and Foundation.
/// (DepotPostgresTests runs the PostgreSQL SQL on a real server.)
final class PredicateDialectTests: XCTestCase {
    private func schema() throws -> Schema {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-dialect-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("d.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        return store.schema
    }

    func testSQLiteIsTheDefaultAndPostgreSQLIsSpelledForPostgreSQL() throws {
        let schema = try schema()
        let entity = try schema.entity("Team")
        for (predicate, arguments, _) in PredicateFixture.cases {
            let implicit = try PredicateCompilation.whereClause(
                predicate: predicate, arguments: arguments, entity: entity, schema: schema)
            let sqlite = try PredicateCompilation.whereClause(
                predicate: predicate, arguments: arguments, entity: entity, schema: schema, dialect: .sqlite)
            XCTAssertEqual(implicit.sql, sqlite.sql, predicate)
            XCTAssertEqual(implicit.arguments, sqlite.arguments, predicate)
            let postgres = try PredicateCompilation.whereClause(
                predicate: predicate, arguments: arguments, entity: entity, schema: schema, dialect: .postgresql)
            XCTAssertEqual(postgres.arguments.count, sqlite.arguments.count, predicate)
            for sqliteOnly in ["?1", "IFNULL", "GLOB", "instr(", "TOTAL(", "depot_matches", " IS NOT ?", " IS ?"] {
                XCTAssertFalse(postgres.sql.contains(sqliteOnly), "\(predicate): \(postgres.sql)")
            }
            if !sqlite.arguments.isEmpty { XCTAssertTrue(postgres.sql.contains("$1"), "\(predicate): \(postgres.sql)") }
        }
        XCTAssertEqual(
            try PredicateCompilation.whereClause(
                predicate: nil, arguments: nil, entity: entity, schema: schema, dialect: .postgresql
            ).sql, "TRUE")
        XCTAssertEqual(
            try PredicateCompilation.whereClause(predicate: nil, arguments: nil, entity: entity, schema: schema).sql,
            "1")
    }

    /// `\d`, `\s`, `\w` and their negations hold the code points ICU's do (planes 0 and 1).
    func testShorthandClassesAreICUs() throws {
        for letter: Unicode.Scalar in ["d", "s", "w", "D", "S", "W"] {
            let ranges = try XCTUnwrap(PostgreSQLPattern.shorthand(letter))
            let expression = try NSRegularExpression(pattern: "^\\\(letter)$")
            var differences: [String] = []
            for value in UInt32(0)...0x1FFFF {
                guard let scalar = Unicode.Scalar(value) else { continue }
                let text = String(scalar)
                let icu = expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
                let ours = ranges.contains { $0.contains(value) }
                if icu != ours { differences.append(String(value, radix: 16)) }
            }
            XCTAssertTrue(
                differences.isEmpty,
                "\\\(letter): \(differences.count) code points differ: \(differences.prefix(20).joined(separator: " "))"
            )
        }
    }

    /// No fold's result is folded again, so `depot_fold` may apply its replacements in any order.
    func testFoldTablesAreIdempotent() {
        for (index, table) in PostgreSQLFunctions.foldTables.enumerated() {
            XCTAssertFalse(table.isEmpty)
            let refolded = table.filter { _, target in target.contains { table[$0] != nil } }
            XCTAssertTrue(refolded.isEmpty, "flags \(index + 1): \(refolded.keys.prefix(10))")
        }
        XCTAssertEqual(
            PostgreSQLFunctions.multipleCaseFoldSources[Array("ss".unicodeScalars.map(\.value))]?.sorted(),
            [0xDF, 0x1E9E])
    }
}
