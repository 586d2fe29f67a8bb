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

    /// Teams A…F (rows 1…6) with players, countries and awkward values.
    func store() throws -> Store {
        if let store = seeded { return store }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-predicates-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("p.sqlite").path)
        _ = try store.defineModel(Self.model)
        func team(_ tempId: String, _ values: [String: JSONValue]) -> InsertedObject {
            InsertedObject(entity: "Team", tempId: tempId, values: values)
        }
        func player(_ name: String, _ age: JSONValue, _ team: String) -> InsertedObject {
            InsertedObject(entity: "Player", values: ["name": .string(name), "age": age, "team": .string(team)])
        }
        _ = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(entity: "Country", tempId: "fr", values: ["name": "France"]),
                InsertedObject(entity: "Country", tempId: "ci", values: ["name": "Côte d'Ivoire"]),
                InsertedObject(entity: "Country", tempId: "jp", values: ["name": "日本"]),
                team(
                    "A",
                    [
                        "teamName": "Étoile", "zone": "Europe", "wins": 3, "rating": 1.5, "active": true,
                        "founded": "1990-05-01T00:00:00.000Z", "country": "fr",
                    ]),
                team(
                    "B",
                    [
                        "teamName": "etoile", "zone": "Africa", "wins": 5, "rating": 2.25, "active": false,
                        "founded": "2001-01-01T12:00:00.000Z", "country": "ci",
                    ]),
                team(
                    "C",
                    [
                        "teamName": "Samurai 100%", "zone": "Asia", "wins": 0, "rating": 3, "active": true,
                        "country": "jp",
                    ]),
                team("D", ["teamName": "under_score", "zone": .null, "wins": .null, "rating": .null, "active": false]),
                team(
                    "E",
                    [
                        "teamName": "Zebra*?", "zone": "Europe", "wins": 10, "rating": -1, "active": true,
                        "founded": "1850-12-31T23:59:59.999Z", "country": "fr",
                    ]),
                team("F", ["teamName": "ÉTOILE Rouge", "zone": "europe", "wins": 3, "rating": 0.5, "country": "ci"]),
                player("Zidane", 30, "A"), player("Henry", 25, "A"),
                player("Drogba", 35, "B"),
                player("Honda", 31, "C"), player("Kagawa", 28, "C"), player("Nakata", .null, "C"),
                player("Éric", 22, "E"),
                InsertedObject(
                    entity: "Tag", tempId: "red", values: ["name": "red", "weight": 1, "teams": ["A", "B"]]),
                InsertedObject(entity: "Tag", tempId: "blue", values: ["name": "blue", "weight": 5]),
                InsertedObject(entity: "Tag", tempId: "green", values: ["name": "Grün", "teams": ["E"]]),
                InsertedObject(entity: "Tag", values: ["name": "unused", "weight": 2, "teams": []]),
            ]))
        // The other side sets pairs too: C gets red and Grün, A gets blue (and keeps red).
        let tags = try store.fetch(FetchRequest(entity: "Tag", sort: [SortDescriptor(key: "name")], resultType: .ids))
        let teams = try store.fetch(
            FetchRequest(
                entity: "Team", predicate: "teamName IN {'Étoile', 'Samurai 100%'}",
                sort: [SortDescriptor(key: "teamName")], resultType: .ids))
        let (blue, green, red) = (tags.ids![1], tags.ids![0], tags.ids![2])
        _ = try store.save(
            StoreSave.Parameters(updated: [
                UpdatedObject(id: teams.ids![0], values: ["tags": [.string(red), .string(green)]]),
                UpdatedObject(id: blue, values: ["teams": [.string(teams.ids![1])]]),
            ]))
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
                properties: ["teamName"]))
        let names = [
            "Étoile": "A", "etoile": "B", "Samurai 100%": "C", "under_score": "D", "Zebra*?": "E", "ÉTOILE Rouge": "F",
        ]
        return (result.objects ?? []).compactMap { names[$0["teamName"]?.stringValue ?? ""] }.sorted().joined()
    }

    /// (predicate, arguments, matching teams).
    static let cases: [(String, JSONValue?, String)] = [
        // Comparisons and their spellings.
        ("wins == 3", nil, "AF"), ("wins = 3", nil, "AF"), ("wins != 3", nil, "BCDE"), ("wins <> 3", nil, "BCDE"),
        ("wins < 3", nil, "C"), ("wins <= 3", nil, "ACF"), ("wins =< 3", nil, "ACF"), ("wins > 3", nil, "BE"),
        ("wins >= 3", nil, "ABEF"), ("wins => 3", nil, "ABEF"), ("3 < wins", nil, "BE"), ("3 == wins", nil, "AF"),
        ("wins == nil", nil, "D"), ("wins != nil", nil, "ABCEF"), ("wins == NULL", nil, "D"), ("nil == wins", nil, "D"),
        ("rating > 1", nil, "ABC"), ("rating < 0", nil, "E"), ("rating == 3", nil, "C"), ("rating == 2.25", nil, "B"),
        ("wins > 2.5", nil, "ABEF"), ("rating >= wins", nil, "C"), ("wins > rating", nil, "ABEF"),
        ("active == YES", nil, "ACEF"), ("active == NO", nil, "BD"), ("active == true", nil, "ACEF"),
        ("active = FALSE", nil, "BD"),
        ("active != YES", nil, "BD"), ("active == 1", nil, "ACEF"),
        // nil semantics: comparisons with nil are false, != nil-aware.
        ("zone == 'Europe'", nil, "AE"), ("zone != 'Europe'", nil, "BCDF"), ("NOT zone == 'Europe'", nil, "BCDF"),
        ("wins < 100", nil, "ABCEF"), ("NOT wins < 100", nil, "D"), ("NOT (wins > 3)", nil, "ACDF"),
        ("!(wins > 3)", nil, "ACDF"),
        ("zone < 'B'", nil, "BC"), ("zone > 'B'", nil, "AEF"),
        // BETWEEN and IN.
        ("wins BETWEEN {3, 5}", nil, "ABF"), ("wins BETWEEN {0, 0}", nil, "C"), ("rating BETWEEN {-5, 1}", nil, "EF"),
        ("wins IN {0, 10}", nil, "CE"), ("wins IN {}", nil, ""), ("NO IN {}", nil, ""), ("$v IN {}", ["v": 1], ""),
        ("zone IN {'Asia', 'Africa'}", nil, "BC"),
        ("zone IN {'Asia', nil}", nil, "CD"), ("wins IN $list", ["list": [3, 5]], "ABF"),
        ("wins IN %@", [[0, 5]], "BC"),
        ("NOT wins IN {3}", nil, "BCDE"), ("zone IN[c] {'EUROPE'}", nil, "AEF"),
        // IN with a string on the right: a substring test, as in NSPredicate.
        ("'BBB' IN 'AABBBAA'", nil, "ABCDEF"), ("'BBB' IN 'AABBAA'", nil, ""), ("'' IN 'x'", nil, "ABCDEF"),
        ("zone IN 'Europe and Asia'", nil, "ACE"), ("zone IN[c] 'EUROPE, ASIA'", nil, "ACEF"),
        ("zone IN[cd] $text", ["text": "africa-asia"], "BC"), ("zone IN %@", ["Africa"], "B"),
        ("teamName IN 'xx etoile yy'", nil, "B"), ("teamName IN[d] 'Etoile!'", nil, "A"),
        ("teamName IN[cd] 'the ETOILE rouge team'", nil, "ABF"), ("'oil' IN teamName", nil, "AB"),
        ("'OIL' IN[c] teamName", nil, "ABF"), ("zone IN zone", nil, "ABCEF"), ("NOT zone IN 'Europe'", nil, "BCDF"),
        ("zone IN ''", nil, ""), ("country.name IN 'La France'", nil, "AE"),
        ("ANY players.name IN 'Zidane and Drogba'", nil, "AB"),
        ("ALL players.name IN[c] 'HONDA KAGAWA NAKATA'", nil, "CDF"),
        ("SUBQUERY(players, $p, $p.name IN[cd] 'eric, henry').@count == 1", nil, "AE"),
        ("'Zidane' IN players.name", nil, "A"), ("wins IN {3} OR zone IN 'Asia'", nil, "ACF"),
        // Strings: BEGINSWITH, ENDSWITH, CONTAINS, LIKE, MATCHES, with [c], [d], [cd].
        ("teamName BEGINSWITH 'Ét'", nil, "A"), ("teamName BEGINSWITH[c] 'ét'", nil, "AF"),
        ("teamName BEGINSWITH[d] 'Et'", nil, "A"),
        ("teamName BEGINSWITH[cd] 'et'", nil, "ABF"), ("teamName BEGINSWITH ''", nil, "ABCDEF"),
        ("teamName ENDSWITH 'oile'", nil, "AB"),
        ("teamName ENDSWITH[c] 'ROUGE'", nil, "F"), ("teamName ENDSWITH '%'", nil, "C"),
        ("teamName CONTAINS '100%'", nil, "C"),
        ("teamName CONTAINS '_'", nil, "D"), ("teamName CONTAINS '%'", nil, "C"),
        ("teamName CONTAINS[c] 'TOI'", nil, "ABF"),
        ("teamName CONTAINS[cd] 'etoi'", nil, "ABF"), ("teamName CONTAINS[d] 'Etoi'", nil, "A"),
        ("teamName CONTAINS[d] 'etoi'", nil, "B"),
        ("teamName CONTAINS 'x'", nil, ""), ("zone CONTAINS 'ur'", nil, "AEF"), ("NOT zone CONTAINS 'ur'", nil, "BCD"),
        ("teamName LIKE 'Z*'", nil, "E"), ("teamName LIKE '?toile'", nil, "AB"),
        ("teamName LIKE[c] 'étoile*'", nil, "AF"),
        ("teamName LIKE[cd] 'ETOILE*'", nil, "ABF"), ("teamName LIKE 'Zebra\\\\*\\\\?'", nil, "E"),
        ("teamName LIKE '*[*'", nil, ""),
        ("teamName LIKE 'under_score'", nil, "D"), ("teamName LIKE 'under?score'", nil, "D"),
        ("teamName MATCHES '[A-Z].*'", nil, "CE"), ("teamName MATCHES '.toile'", nil, "AB"),
        ("teamName MATCHES[c] 'É.*'", nil, "AF"),
        ("teamName MATCHES 'toile'", nil, ""), ("teamName MATCHES[cd] 'etoile.*'", nil, "ABF"),
        ("zone MATCHES 'E.*'", nil, "AE"),
        ("teamName ==[c] 'ÉTOILE'", nil, "A"), ("teamName ==[cd] 'ETOILE'", nil, "AB"),
        ("teamName !=[cd] 'etoile'", nil, "CDEF"),
        ("teamName == 'Étoile'", nil, "A"), ("teamName == \"etoile\"", nil, "B"),
        ("teamName == 'under_score'", nil, "D"),
        // AND / OR / NOT precedence, parentheses, constants.
        ("wins > 2 AND zone == 'Europe'", nil, "AE"), ("wins > 2 && zone == 'Europe'", nil, "AE"),
        ("wins == 0 OR wins == 10", nil, "CE"), ("wins == 0 || wins == 10", nil, "CE"),
        ("wins == 0 OR wins == 10 AND zone == 'Asia'", nil, "C"),
        ("(wins == 0 OR wins == 10) AND zone == 'Europe'", nil, "E"),
        ("NOT wins == 3 AND active == YES", nil, "CE"), ("NOT (wins == 3 AND active == YES)", nil, "BCDE"),
        ("TRUEPREDICATE", nil, "ABCDEF"), ("FALSEPREDICATE", nil, ""), ("NOT FALSEPREDICATE", nil, "ABCDEF"),
        ("truepredicate AND wins == 5", nil, "B"), ("wins == 3 and zone == 'europe'", nil, "F"),
        ("wins == 3 or wins == 5", nil, "ABF"),
        ("((((wins == 5))))", nil, "B"),
        // Variables and format arguments.
        ("zone == $zone AND wins >= $min", ["zone": "Europe", "min": 3], "AE"),
        ("teamName BEGINSWITH[cd] $q", ["q": "é"], "ABF"),
        ("wins > %d", [4], "BE"), ("rating < %f", [1.0], "EF"), ("%K == %@", ["zone", "Asia"], "C"),
        ("%K > %@", ["wins", 4], "BE"),
        ("zone == %@ OR zone == %@", ["Asia", "Africa"], "BC"), ("zone == $z", ["z": nil], "D"),
        ("wins == $w", ["w": 3], "AF"),
        ("teamName == %@", ["'); DROP TABLE e_Team; --"], ""), ("teamName CONTAINS %@", ["%"], "C"),
        // Dates.
        ("founded > '2000-01-01T00:00:00Z'", nil, "B"), ("founded < '1900-01-01'", nil, "E"),
        ("founded == nil", nil, "CDF"),
        ("founded BETWEEN {'1980-01-01', '2010-01-01'}", nil, "AB"),
        ("founded >= $d", ["d": "1990-05-01T00:00:00.000Z"], "AB"),
        ("founded > 0", nil, "AB"), ("founded == '2001-01-01T13:00:00+01:00'", nil, "B"),
        // To-one key paths.
        ("country.name == 'France'", nil, "AE"), ("country.name BEGINSWITH[cd] 'cote'", nil, "BF"),
        ("country.name == nil", nil, "D"),
        ("country == nil", nil, "D"), ("country != nil", nil, "ABCEF"), ("country.name CONTAINS '本'", nil, "C"),
        ("country.name IN {'France', '日本'}", nil, "ACE"), ("country == %@", ["Country/1"], "AE"),
        ("NOT country.name == 'France'", nil, "BCDF"),
        // To-many: ANY, ALL, NONE, SOME, aggregates, SUBQUERY.
        ("ANY players.age > 30", nil, "BC"), ("SOME players.age > 30", nil, "BC"),
        ("ALL players.age > 24", nil, "ABDF"),
        ("ALL players.age > 20", nil, "ABDEF"), ("NONE players.age > 30", nil, "ADEF"),
        ("ANY players.name BEGINSWITH 'H'", nil, "AC"),
        ("ANY players.name ==[cd] 'eric'", nil, "E"), ("players.@count == 0", nil, "DF"),
        ("players.@count > 1", nil, "AC"),
        ("players.@count == 3", nil, "C"), ("players.@sum.age == 55", nil, "A"), ("players.@sum.age == 0", nil, "DF"),
        ("players.@avg.age > 30", nil, "B"), ("players.@min.age == 28", nil, "C"), ("players.@max.age >= 35", nil, "B"),
        ("players.@avg.age == nil", nil, "DF"), ("SUBQUERY(players, $p, $p.age > 27).@count == 2", nil, "C"),
        ("SUBQUERY(players, $p, $p.age > 29 AND $p.name BEGINSWITH 'Z').@count > 0", nil, "A"),
        ("SUBQUERY(players, $p, $p.age == nil).@count == 1", nil, "C"), ("ANY players.age == nil", nil, "C"),
        ("ANY players.name IN {'Drogba', 'Éric'}", nil, "BE"), ("'Zidane' IN players.name", nil, "A"),
        ("ANY players == %@", ["Player/3"], "B"),
        ("NOT ANY players.age > 30", nil, "ADEF"), ("ANY players.age > 30 AND wins > 1", nil, "B"),
        ("players.@count == wins", nil, ""),
        ("ANY country.teams.wins > 5", nil, "AE"),
        // Keywords are case-insensitive; #escapes keys.
        ("wins Between {3, 3}", nil, "AF"), ("zone In {'Asia'}", nil, "C"), ("teamName beginswith 'Z'", nil, "E"),
        ("any players.age > 34", nil, "B"), ("#wins == 0", nil, "C"),
        // Identity: `id` and `SELF` are the object (Core Data's `self == %@`).
        ("id == %@", ["Team/2"], "B"), ("SELF == %@", ["Team/3"], "C"), ("self != 'Team/1'", nil, "BCDEF"),
        ("id IN {'Team/1', 'Team/6'}", nil, "AF"), ("SELF IN %@", [["Team/4", "Team/5"]], "DE"),
        ("SELF.wins == 5", nil, "B"), ("country.id == 'Country/1'", nil, "AE"),
        ("country.SELF == %@", ["Country/3"], "C"), ("ANY players.SELF == %@", ["Player/3"], "B"),
        ("ANY players.id IN {'Player/1', 'Player/4'}", nil, "AC"), ("id == nil", nil, ""),
        // Many-to-many (Team.tags ↔ Tag.teams, a join table): red A B C, blue A, Grün C E, unused none.
        ("ANY tags.name == 'red'", nil, "ABC"), ("tags.name == 'blue'", nil, "A"), ("tags.@count == 0", nil, "DF"),
        ("tags.@count == 2", nil, "AC"), ("ALL tags.name == 'red'", nil, "BDF"),
        ("NONE tags.name == 'red'", nil, "DEF"),
        ("ANY tags.name ==[cd] 'grun'", nil, "CE"), ("tags.@sum.weight == 6", nil, "A"),
        ("tags.@max.weight == 1", nil, "BC"), ("tags.@avg.weight == nil", nil, "DEF"),
        ("SUBQUERY(tags, $t, $t.weight > 0).@count == 1", nil, "BC"), ("'blue' IN tags.name", nil, "A"),
        ("ANY tags == %@", ["Tag/2"], "A"), ("ANY tags.name IN 'red and blue'", nil, "ABC"),
        ("ANY tags.weight > 1 OR players.@count == 0", nil, "ADF"), ("NOT ANY tags.name BEGINSWITH 'r'", nil, "DEF"),
    ]

    /// The same cases through the in-memory evaluator.
    func evaluated(_ predicate: String, _ arguments: JSONValue?) throws -> String {
        let store = try store()
        let teams = try store.fetch(FetchRequest(entity: "Team")).objects ?? []
        let players = try store.fetch(FetchRequest(entity: "Player")).objects ?? []
        let countries = try store.fetch(FetchRequest(entity: "Country")).objects ?? []
        var byID: [String: [String: JSONValue]] = [:]
        for object in teams + players + countries + (try store.fetch(FetchRequest(entity: "Tag")).objects ?? []) {
            byID[object["id"]!.stringValue!] = object.objectValue!
        }
        let tagsOfTeams = try store.fetch(FetchRequest(entity: "Team", properties: ["tags"])).objects ?? []
        let evaluator = PredicateEvaluator(model: Self.model, object: { byID[$0] }) { owner, key in
            let id = owner["id"]?.stringValue
            if key == "tags" {
                let tags = tagsOfTeams.first { $0["id"]?.stringValue == id }?["tags"]?.arrayValue ?? []
                return tags.compactMap { $0.stringValue.flatMap { byID[$0] } }
            }
            return (key == "players" ? players : teams).filter {
                $0[key == "players" ? "team" : "country"]?.stringValue == id
            }.map { $0.objectValue! }
        }
        let node = try PredicateParser.parse(predicate, arguments: arguments)
        let names = [
            "Étoile": "A", "etoile": "B", "Samurai 100%": "C", "under_score": "D", "Zebra*?": "E", "ÉTOILE Rouge": "F",
        ]
        return try teams.filter { try evaluator.evaluate(node, on: $0.objectValue!, entity: "Team") }
            .compactMap { names[$0["teamName"]?.stringValue ?? ""] }.sorted().joined()
    }

    func testCaseTable() throws {
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
