import DepotPostgres
import DepotProtocol
import DepotTestSupport
import Foundation
import GRDB
import Logging
import PostgresNIO
import XCTest

@testable import DepotStore

/// Predicates compiled for PostgreSQL (SQLDialect.postgresql) against a real server: the case table
/// and the random differential test of DepotStoreTests, on the same rows, agree with the in-memory
/// evaluator; the helper functions fold and match as PredicateText does.
final class PredicatePostgresTests: XCTestCase {
    private let logger = Logger(label: "depot.tests.predicates")

    /// The shared server; skips only when PostgreSQL is not installed (CI installs it).
    private func server() throws -> PostgresServer {
        let binaries =
            ProcessInfo.processInfo.environment["PG_BIN"].map { [$0] }
            ?? {
                let root = "/usr/lib/postgresql"
                return ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).map { "\(root)/\($0)/bin" }
            }()
        guard binaries.contains(where: { FileManager.default.isExecutableFile(atPath: "\($0)/initdb") }) else {
            throw XCTSkip("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): make setup-system")
        }
        return try PostgresServer.sharedOrFail()
    }

    /// A SQLite store with the predicate model, filled by `seed`.
    private func sqliteStore(_ seed: (Store) throws -> Void) throws -> Store {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-pg-predicates-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("p.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        try seed(store)
        return store
    }

    /// Creates the store's tables in a new PostgreSQL schema and copies every object and pair into them,
    /// through the wire values the store returns (ids kept); leaves the connection's search_path on it.
    private func load(_ store: Store, on connection: PostgresConnection) async throws -> PostgresStoreSchema {
        let tables = try PostgresStoreSchema(name: uniqueSchema("predicates"), model: store.schema)
        try await tables.create(on: connection, logger: logger)
        try await connection.query(PostgresQuery(unsafeSQL: tables.searchPath), logger: logger)
        for entity in store.schema.entities {
            let keys = entity.columnKeys
            let columns = (["id"] + keys.map { entity.column($0) }).joined(separator: ", ")
            let placeholders = (1...(keys.count + 1)).map { "$\($0)" }.joined(separator: ", ")
            let insert = "INSERT INTO \(entity.table) (\(columns)) VALUES (\(placeholders))"
            let joined = entity.joins.filter { $0.value.isFirstSide }
            let objects =
                try store.fetch(
                    FetchRequest(
                        entity: entity.name, properties: entity.description.attributes.map(\.name) + keys + joined.keys)
                ).objects ?? []
            for object in objects {
                let id = try XCTUnwrap(object["id"]?.stringValue.flatMap(ObjectID.init))
                var bindings = PostgresBindings()
                bindings.append(id.row)
                for key in keys {
                    let value = object[key] ?? .null
                    if let attribute = entity.attributes[key] {
                        let stored = try ValueCoding.databaseValue(value, type: attribute.type)
                        if attribute.type == .boolean, case .int64(let flag) = stored.storage {
                            bindings.append(flag != 0)
                        } else {
                            bindings.append(stored)
                        }
                    } else if let text = value.stringValue, let reference = ObjectID(text) {
                        bindings.append(reference.row)
                    } else {
                        bindings.appendNull()
                    }
                }
                try await connection.query(PostgresQuery(unsafeSQL: insert, binds: bindings), logger: logger)
                for (key, join) in joined {
                    for member in object[key]?.arrayValue ?? [] {
                        let memberID = try XCTUnwrap(member.stringValue.flatMap(ObjectID.init))
                        var pair = PostgresBindings()
                        pair.append(id.row)
                        pair.append(memberID.row)
                        try await connection.query(
                            PostgresQuery(
                                unsafeSQL:
                                    "INSERT INTO \(join.table) (\(join.ownerColumn), \(join.memberColumn)) VALUES ($1, $2)",
                                binds: pair), logger: logger)
                    }
                }
            }
        }
        return tables
    }

    /// The ids of the teams `predicate` selects in PostgreSQL.
    private func teamIDs(
        _ predicate: String, _ arguments: JSONValue? = nil, schema: Schema, on connection: PostgresConnection
    ) async throws -> Set<String> {
        let entity = try schema.entity("Team")
        let condition = try PredicateCompilation.whereClause(
            predicate: predicate, arguments: arguments, entity: entity, schema: schema, dialect: .postgresql)
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT t0.id FROM \(entity.table) AS t0 WHERE \(condition.sql)",
                binds: PostgresBindings(condition.arguments)), logger: logger)
        var ids = Set<String>()
        for try await id in rows.decode(Int64.self) { ids.insert("Team/\(id)") }
        return ids
    }

    /// The whole case table of DepotStoreTests: PostgreSQL selects the listed teams, as the evaluator does.
    func testCaseTableMatchesTheEvaluator() async throws {
        let server = try server()
        try await server.withConnection { connection in try await checkCaseTable(on: connection) }
    }

    /// The random differential test of DepotStoreTests (same seed, rows and predicates) on PostgreSQL.
    func testRandomPredicatesMatchTheEvaluator() async throws {
        let server = try server()
        try await server.withConnection { connection in try await checkRandomPredicates(on: connection) }
    }

    /// Both again in a database whose default collation is ICU's root locale (`é` sorts next to `e`, `a`
    /// before `B`): text still compares by code points, as in SQLite and the evaluator.
    func testTextOrderIgnoresTheDatabaseCollation() async throws {
        let server = try server()
        let database = uniqueSchema("depot_icu")
        try await server.withConnection { connection in
            try await connection.query(
                PostgresQuery(
                    unsafeSQL:
                        "CREATE DATABASE \(database) TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C' LOCALE_PROVIDER icu ICU_LOCALE 'und'"
                ), logger: logger)
        }
        var configuration = server.url.configuration
        configuration.database = database
        let connection = try await PostgresConnection.connect(
            configuration: configuration, id: Int.random(in: 1...Int(Int32.max)), logger: logger)
        do {
            let rows = try await connection.query("SELECT 'a' < 'B', 'é' < 'f'", logger: logger)
            for try await (caseBlind, accentBlind) in rows.decode((Bool, Bool).self) {
                XCTAssertTrue(caseBlind && accentBlind, "the database does not sort by ICU's root locale")
            }
            try await checkCaseTable(on: connection)
            try await checkRandomPredicates(on: connection)
            try? await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
    }

    private func checkCaseTable(on connection: PostgresConnection) async throws {
        let store = try sqliteStore { store in
            try PredicateFixture.seedCaseTable(
                save: { _ = try store.save($0) }, fetchIDs: { try store.fetch($0).ids ?? [] })
        }
        let (evaluator, teams) = try PredicateFixture.evaluator { try store.fetch($0).objects ?? [] }
        var letters: [String: String] = [:]
        for team in teams {
            letters[team["id"]!.stringValue!] = PredicateFixture.teamLetters[team["teamName"]?.stringValue ?? ""]
        }
        do {
            _ = try await load(store, on: connection)
            var failures: [String] = []
            var passed = 0
            for (predicate, arguments, expected) in PredicateFixture.cases {
                do {
                    let ids = try await teamIDs(predicate, arguments, schema: store.schema, on: connection)
                    let got = ids.compactMap { letters[$0] }.sorted().joined()
                    let node = try PredicateParser.parse(predicate, arguments: arguments)
                    let inMemory = try teams.filter {
                        try evaluator.evaluate(node, on: $0.objectValue!, entity: "Team")
                    }.compactMap { letters[$0["id"]!.stringValue!] }.sorted().joined()
                    if got != expected || inMemory != expected {
                        failures.append("\(predicate): expected \(expected), PostgreSQL \(got), evaluator \(inMemory)")
                    } else {
                        passed += 1
                    }
                } catch {
                    failures.append("\(predicate): \(error)")
                }
            }
            XCTAssertGreaterThanOrEqual(PredicateFixture.cases.count, 150)
            XCTAssertEqual(passed, PredicateFixture.cases.count)
            print(
                "PostgreSQL: \(passed) of \(PredicateFixture.cases.count) cases agree with the table and the evaluator")
            XCTAssertTrue(
                failures.isEmpty,
                "\(failures.count) of \(PredicateFixture.cases.count) cases failed on PostgreSQL:\n"
                    + failures.joined(separator: "\n"))
        }
    }

    /// Shapes the random generator does not make: text BETWEEN and extremes (ordering by code points),
    /// booleans in lists, aggregates of text, MATCHES with classes and [c] runs, LIKE with options.
    static let morePredicates = [
        "zone BETWEEN {'A', 'f'}", "teamName BETWEEN {'Z', 'é'}", "zone BETWEEN[c] {'e', 'eu'}",
        "players.@max.name > 'M'", "players.@min.name == 'Drogba'", "players.@min.name < 'É'",
        "tags.@max.name < 'b'", "tags.@min.name BEGINSWITH 'É'", "active IN {YES}", "active IN {NO, nil}",
        "ANY players.name BETWEEN {'A', 'é'}", "country.name > 'D'", "SELF.teamName < 'b'",
        "SUBQUERY(players, $p, $p.name MATCHES[c] 'é.*').@count > 0", "teamName LIKE[cd] '*e*'",
        "zone ENDSWITH[cd] 'E'", "teamName MATCHES '.*\\\\d'", "teamName MATCHES[cd] 'ETOILE\\\\d+'",
        "teamName MATCHES '\\\\w+\\\\d{1,2}'", "zone MATCHES[c] '(eu|zè).*'", "teamName MATCHES '[^a-z]*'",
        "ALL tags.weight BETWEEN {0, 3}", "tags.@min.weight == 0", "players.@avg.age BETWEEN {20, 30}",
        "founded BETWEEN {0, '2000-01-01'}", "rating IN {0.5, 1.5, 3}", "zone IN[cd] {'ETOILE', 'zebre'}",
        "teamName CONTAINS[cd] 'ZEB'", "ANY players.name LIKE[c] '?T*'", "NONE tags.name MATCHES[c] 'é.*'",
        "zone < teamName", "zone >= country.name", "players.@max.age == wins", "players.@sum.age > rating",
    ]

    private func checkRandomPredicates(on connection: PostgresConnection) async throws {
        var random = SeededGenerator(seed: 2026)
        let inserted = PredicateFixture.differentialRows(&random)
        let store = try sqliteStore { store in _ = try store.save(StoreSave.Parameters(inserted: inserted)) }
        let (evaluator, teams) = try PredicateFixture.evaluator { try store.fetch($0).objects ?? [] }
        let predicates =
            (0..<2500).map { _ in PredicateFixture.randomPredicate(depth: 3, &random) } + Self.morePredicates
        do {
            _ = try await load(store, on: connection)
            var checked = 0
            var disagreements: [String] = []
            for predicate in predicates {
                let ids: Set<String>
                let node: PredicateNode
                do {
                    node = try PredicateParser.parse(predicate)
                    ids = try await teamIDs(predicate, schema: store.schema, on: connection)
                } catch {
                    disagreements.append("\(predicate): PostgreSQL side failed: \(error)")
                    continue
                }
                let inMemory = try PredicateFixture.matchingIDs(node, in: teams, evaluator: evaluator)
                checked += 1
                if let line = PredicateFixture.disagreement(predicate, "PostgreSQL", ids: ids, inMemory: inMemory) {
                    disagreements.append(line)
                }
            }
            XCTAssertEqual(checked, 2500 + Self.morePredicates.count)
            print(
                "PostgreSQL: \(checked) predicates ran (2500 random, \(Self.morePredicates.count) more), \(disagreements.count) disagreements"
            )
            XCTAssertTrue(
                disagreements.isEmpty,
                "\(disagreements.count) disagreements:\n" + disagreements.prefix(15).joined(separator: "\n"))
        }
    }

    /// `depot_fold` gives PredicateText.fold's answer for every assigned code point alone and followed by
    /// marks, with each of [c], [d] and [cd], for words of several scripts, and for random clusters.
    func testFoldMatchesPredicateText() async throws {
        let server = try server()
        var scalars: [String] = []
        for value in UInt32(1)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            switch scalar.properties.generalCategory {
            case .unassigned, .privateUse, .surrogate: continue
            default: scalars.append(String(scalar))
            }
        }
        let words = [
            "", "Étoile", "E\u{301}toile", "ÉTOILE Rouge", "Côte d'Ivoire", "Straße", "İstanbul", "ΣΊΣΥΦΟΣ", "ﬁne",
            "ǄEMAL", "日本", "zèbre", "Å\u{30A}", "naïve café", "\u{301}e", "ŉ", "ᾳ", "e\u{301}\u{20DD}x",
            "under_score 100%", "Kelvin \u{212A}", "ſ", "a*b?c", "שָׁלוֹם", "किताब", "مُحَمَّد", "한국어", "Ա\u{301}\u{610}",
        ]
        // Every code point followed by a low and a high extender (what each does to the marks after it), and
        // random clusters of letters of several scripts with marks, joiners and variation selectors.
        let clusters = scalars.map { $0 + "\u{301}\u{610}" }
        let alphabet = [
            "a", "E", "É", "e", "\u{301}", "\u{300}", "\u{327}", "ß", "İ", "ı", "Σ", "ς", "\n", "日", " ", "ø", "ᾳ", "ŉ",
            "\u{345}", "Å", "ǅ", "\u{200D}", "\u{FE0F}", "1", "ﬁ", "\u{1F1EB}", "ḝ", "\r", "ש", "\u{5B8}", "\u{5C1}",
            "\u{591}", "\u{592}", "क", "\u{93F}", "\u{94D}", "Ա", "\u{212A}", "ب", "\u{64E}", "\u{651}", "\u{20DD}",
            "\u{344}", "ﬓ", "ᄀ", "\u{1161}", "가", "\u{1DCD}",
        ]
        var random = SeededGenerator(seed: 13)
        let randomTexts = (0..<4000).map { _ in
            (0..<Int.random(in: 1...7, using: &random)).map { _ in alphabet.randomElement(using: &random)! }.joined()
        }
        try await server.withConnection { connection in
            let tables = try PostgresStoreSchema(name: uniqueSchema("fold"), model: Schema.empty)
            try await tables.create(on: connection, logger: logger)
            try await connection.query(PostgresQuery(unsafeSQL: tables.searchPath), logger: logger)
            var mismatches: [String] = []
            for flags in 1...3 {
                for texts in [scalars, words, clusters, randomTexts] {
                    var bindings = PostgresBindings()
                    bindings.append(texts)
                    bindings.append(flags)
                    let rows = try await connection.query(
                        PostgresQuery(
                            unsafeSQL:
                                "SELECT depot_fold(t, $2::int) FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i) ORDER BY i",
                            binds: bindings), logger: logger)
                    var index = 0
                    for try await folded in rows.decode(String.self) {
                        let expected = PredicateText.fold(texts[index], flags)
                        if !folded.unicodeScalars.elementsEqual(expected.unicodeScalars) {
                            mismatches.append(
                                "[\(flags)] \(texts[index].unicodeScalars.map { String($0.value, radix: 16) })")
                        }
                        index += 1
                    }
                    XCTAssertEqual(index, texts.count)
                }
            }
            XCTAssertTrue(
                mismatches.isEmpty,
                "\(mismatches.count) folds differ:\n" + mismatches.prefix(20).joined(separator: "\n"))
        }
    }

    /// Translated MATCHES patterns give ICU's answer (PredicateText.matches) on awkward subjects: line
    /// terminators before the end, Unicode digits and spaces, case variants (Kelvin sign, long s, final sigma).
    func testPatternsMatchAsICU() async throws {
        let server = try server()
        let subjects = [
            "", "abc", "abc\n", "abc\r\n", "abc\n\n", "abc\u{2028}", "ABC", "a.c", "a\nc", "\u{212A}", "k", "K", "ſ",
            "s",
            "S", "123", "١٢٣", "a b", "a\u{A0}b", "a\tb", "é", "É", "e\u{301}", "x_y", "naïve", "Straße", "σς", "ΣΣ",
            "[*]", "aa", "aaa", "(x)", "日本", "Étoile", "ÉTOILE Rouge", "Zebra*?", "under_score", "Samurai 100%", "ß",
            "ẞ",
            "SS", "ss", "Straße", "STRASSE", "strasse", "ﬁrst", "FIRST", "ﬃ", "ﬀi", "fﬁ", "ﬆ", "sst", "ssss", "ßß",
            "sß",
            "aß", "İ", "i\u{307}", "I\u{307}", "J\u{30C}", "ǰ", "ΐ", "\u{3B9}\u{308}\u{301}",
        ]
        let patterns = [
            "abc", ".*", "a.c", "[a-c]+", "[^a-c]*", "(a|b)c?", "a{2,3}", "a+?", "\\d+", "\\D*", "\\s", "a\\sb", "\\w+",
            "\\W", "[\\d\\s]+", "k", "s", "[k-l]", "\\.", "\\Q[*]\\E", "\\[\\*\\]", "é", "(?:ab)+c", "^abc$", "abc$",
            "ab$", "\\u00e9", "\\x{212A}", "[a-z]{2}\\u0020?", "σ+", "Σ+", "日.", "[A-Z].*", ".toile", "É.*",
            "etoile.*", ".*e.*", ".*[0-9]", "[^\\s]+", "[\\w&&[a]]", "straße", "ß", "ss", "first", "ffi", "st+", "ß+",
            "(ss)",
            "s[s]", "as", "İ", "i\\u0307", "ǰ", "ΐ", "sss", "s(?:s)t", "ß?", "\\Qss\\E",
        ]
        try await server.withConnection { connection in
            let tables = try PostgresStoreSchema(name: uniqueSchema("matches"), model: Schema.empty)
            try await tables.create(on: connection, logger: logger)
            try await connection.query(PostgresQuery(unsafeSQL: tables.searchPath), logger: logger)
            let cache = PredicateText.RegexCache()
            var mismatches: [String] = []
            var compared = 0
            var refused: [String] = []
            for pattern in patterns {
                for flags in 0...3 {
                    let translated: String
                    do {
                        translated = try PostgreSQLPattern.translate(pattern, caseInsensitive: flags & 1 != 0)
                    } catch {
                        XCTAssertEqual((error as? RPCError)?.code, .invalidParams)
                        refused.append("\(pattern) [\(flags)]")
                        continue
                    }
                    var bindings = PostgresBindings()
                    bindings.append(subjects)
                    bindings.append(translated)
                    bindings.append(flags & 2 != 0)
                    let rows = try await connection.query(
                        PostgresQuery(
                            unsafeSQL: """
                                SELECT (CASE WHEN $3 THEN depot_fold(s, 2) ELSE s END) ~ $2
                                FROM unnest($1::text[]) WITH ORDINALITY AS u(s, i) ORDER BY i
                                """, binds: bindings), logger: logger)
                    var index = 0
                    for try await matched in rows.decode(Bool.self) {
                        let expected = try PredicateText.matches(subjects[index], pattern, flags: flags, cache: cache)
                        if matched != expected {
                            mismatches.append(
                                "'\(subjects[index].debugDescription)' MATCHES[\(flags)] '\(pattern)': ICU \(expected)")
                        }
                        compared += 1
                        index += 1
                    }
                }
            }
            print("MATCHES: \(compared) subject/pattern pairs compared; refused: \(refused.joined(separator: ", "))")
            XCTAssertEqual(refused, ["[\\w&&[a]] [0]", "[\\w&&[a]] [1]", "[\\w&&[a]] [2]", "[\\w&&[a]] [3]"])
            XCTAssertTrue(
                mismatches.isEmpty,
                "\(mismatches.count) answers differ:\n" + mismatches.prefix(20).joined(separator: "\n"))
        }
    }

    /// What PostgreSQL cannot evaluate as the evaluator does is refused with -32602 naming it; SQLite still runs it.
    func testRefusedConstructsNameThemselves() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-pg-refusals-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("r.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        let entity = try store.schema.entity("Team")
        let refused: [(String, String)] = [
            ("teamName MATCHES zone", "constant pattern"), ("teamName MATCHES '\\\\bEt.*'", "'\\b'"),
            ("teamName MATCHES '\\\\p{L}+'", "'\\p'"), ("teamName MATCHES '(?i)et.*'", "(?i"),
            ("teamName MATCHES 'a++'", "possessive"), ("teamName MATCHES '(a)\\\\1'", "'\\1'"),
            ("teamName MATCHES '(?=a).*'", "(?="), ("teamName MATCHES '[[a]b]'", "nested set"),
            ("teamName MATCHES 'a{1,300}'", "255"), ("teamName MATCHES[c] '[ß]'", "'ß' with [c]"),
            ("'a' == 3", "cannot compare text with a number"),
        ]
        for (predicate, fragment) in refused {
            XCTAssertNoThrow(
                try PredicateCompilation.whereClause(
                    predicate: predicate, arguments: nil, entity: entity, schema: store.schema), predicate)
            do {
                _ = try PredicateCompilation.whereClause(
                    predicate: predicate, arguments: nil, entity: entity, schema: store.schema, dialect: .postgresql)
                XCTFail("\(predicate) compiled for PostgreSQL")
            } catch {
                XCTAssertEqual(error.code, .invalidParams, predicate)
                XCTAssertTrue(error.message.contains(fragment), "\(predicate): \(error.message)")
            }
        }
    }

    /// Names PostgreSQL would cut short at 63 bytes are refused when the tables are defined.
    func testLongNamesAreRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-pg-names-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("n.sqlite").path)
        let long = String(repeating: "x", count: 64)
        _ = try store.defineModel([
            EntityDescription(name: "Item", attributes: [AttributeDescription(name: long, type: .string)])
        ])
        XCTAssertThrowsError(try PostgresStoreSchema(name: "depot", model: store.schema)) { error in
            XCTAssertTrue("\(error)".contains(long), "\(error)")
        }
        XCTAssertThrowsError(try PostgresStoreSchema(name: "Depot", model: .empty))
        XCTAssertNoThrow(try PostgresStoreSchema(name: "depot", model: .empty))
    }
}
