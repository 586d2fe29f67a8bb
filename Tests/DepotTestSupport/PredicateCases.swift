import DepotProtocol

/// The predicate tests' data and cases, shared by the SQLite tests (DepotStoreTests) and the
/// PostgreSQL ones (DepotPostgresTests) so that both stores answer the same table.
extension PredicateFixture {
    /// Team letters by team name: the case table names the matching teams by letter.
    public static let teamLetters = [
        "Étoile": "A", "etoile": "B", "Samurai 100%": "C", "under_score": "D", "Zebra*?": "E", "ÉTOILE Rouge": "F",
    ]

    /// The predicate tests' table: (predicate, arguments, the teams that match, as letters A…F).
    public static let cases: [(String, JSONValue?, String)] = [
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

    /// Saves the case table's objects into an empty store with ``model``: teams A…F (rows 1…6)
    /// with players, countries, tags and awkward values. `fetchIDs` answers a fetch of ids.
    public static func seedCaseTable(
        save: (StoreSave.Parameters) throws -> Void, fetchIDs: (FetchRequest) throws -> [String]
    ) throws {
        func team(_ tempId: String, _ values: [String: JSONValue]) -> InsertedObject {
            InsertedObject(entity: "Team", tempId: tempId, values: values)
        }
        func player(_ name: String, _ age: JSONValue, _ team: String) -> InsertedObject {
            InsertedObject(entity: "Player", values: ["name": .string(name), "age": age, "team": .string(team)])
        }
        try save(
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
        let tags = try fetchIDs(FetchRequest(entity: "Tag", sort: [SortDescriptor(key: "name")], resultType: .ids))
        let teams = try fetchIDs(
            FetchRequest(
                entity: "Team", predicate: "teamName IN {'Étoile', 'Samurai 100%'}",
                sort: [SortDescriptor(key: "teamName")], resultType: .ids))
        let (blue, green, red) = (tags[1], tags[0], tags[2])
        try save(
            StoreSave.Parameters(updated: [
                UpdatedObject(id: teams[0], values: ["tags": [.string(red), .string(green)]]),
                UpdatedObject(id: blue, values: ["teams": [.string(teams[1])]]),
            ]))
    }

    /// The random rows of the differential test (countries, 40 teams, 90 players, 12 tags), drawn from `random`.
    public static func differentialRows(_ random: inout SeededGenerator) -> [InsertedObject] {
        // With look-alikes (DESIGN.md §4, text is bytes): spellings Swift's `String ==` joins.
        let words =
            [
                "Étoile", "etoile", "ÉTOILE", "Zebra", "zèbre", "Samurai", "under_score", "100%", "a*b?c", "日本", "",
                "Eu",
                "eu",
            ] + LookAlikeText.all
        func maybe(_ value: JSONValue, _ odds: Int = 5) -> JSONValue {
            Int.random(in: 0..<odds, using: &random) == 0 ? .null : value
        }
        var inserted: [InsertedObject] = [
            InsertedObject(entity: "Country", tempId: "c0", values: ["name": "France"]),
            InsertedObject(entity: "Country", tempId: "c1", values: ["name": "Côte d'Ivoire"]),
            InsertedObject(entity: "Country", tempId: "c2", values: ["name": "日本"]),
        ]
        for index in 0..<40 {
            inserted.append(
                InsertedObject(
                    entity: "Team", tempId: "t\(index)",
                    values: [
                        "teamName": .string(words.randomElement(using: &random)! + String(index)),
                        "zone": maybe(.string(words.randomElement(using: &random)!)),
                        "wins": maybe(.int(Int64.random(in: -1...6, using: &random))),
                        "rating": maybe(.double(Double(Int.random(in: -4...8, using: &random)) / 2)),
                        "active": .bool(Bool.random(using: &random)),
                        "founded": maybe(
                            .string(
                                ISO8601.string(
                                    from: Double(Int.random(in: -1_000_000_000...1_700_000_000, using: &random))))),
                        "country": maybe(.string("c\(Int.random(in: 0..<3, using: &random))"), 4),
                    ]))
        }
        for index in 0..<90 {
            inserted.append(
                InsertedObject(
                    entity: "Player",
                    values: [
                        "name": .string(words.randomElement(using: &random)!),
                        "age": maybe(.int(Int64.random(in: 18...40, using: &random))),
                        "team": .string("t\(Int.random(in: 0..<35, using: &random))"),
                    ]))
        }
        // Many-to-many: each tag holds a random set of teams (the join table), some none.
        for index in 0..<12 {
            let teams = (0..<Int.random(in: 0...6, using: &random)).map { _ in
                JSONValue.string("t\(Int.random(in: 0..<38, using: &random))")
            }
            inserted.append(
                InsertedObject(
                    entity: "Tag",
                    values: [
                        "name": .string(words.randomElement(using: &random)! + String(index % 3)),
                        "weight": maybe(.int(Int64.random(in: 0...4, using: &random))), "teams": .array(teams),
                    ]))
        }
        return inserted
    }

    /// A random well-typed predicate over Team, `depth` levels of AND/OR/NOT deep at most.
    public static func randomPredicate(depth: Int, _ random: inout SeededGenerator) -> String {
        if depth > 0 {
            switch Int.random(in: 0..<6, using: &random) {
            case 0:
                return
                    "(\(randomPredicate(depth: depth - 1, &random)) AND \(randomPredicate(depth: depth - 1, &random)))"
            case 1:
                return
                    "(\(randomPredicate(depth: depth - 1, &random)) OR \(randomPredicate(depth: depth - 1, &random)))"
            case 2: return "NOT (\(randomPredicate(depth: depth - 1, &random)))"
            default: break
            }
        }
        func pick<T>(_ values: [T]) -> T { values.randomElement(using: &random)! }
        let ordering = ["==", "!=", "<", "<=", ">", ">="]
        let stringOps = ["BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "==", "!=", "<", ">="]
        let options = ["", "[c]", "[d]", "[cd]"]
        let patterns = [
            "'e'", "'É'", "'et'", "'ile'", "'eu'", "'*o*'", "'?t*'", "'zè*'", "''", "'100%'", "'_'", "'a*b'", "'日'",
            "'ÉT*'", "nil", "'jos\u{E9}'", "'jose\u{301}'", "'\u{212B}'", "'A\u{30A}'", "'\u{C5}'", "'\u{FB01}'",
            "'fi'", "'\u{301}'", "'\u{212A}'", "'e\u{301}'",
        ]
        switch Int.random(in: 0..<23, using: &random) {
        case 0: return "wins \(pick(ordering)) \(pick(["nil", "-1", "0", "2", "3", "6", "2.5"]))"
        case 1: return "rating \(pick(ordering)) \(pick(["nil", "0", "1.5", "-1", "2"]))"
        case 2: return "\(pick(["teamName", "zone"])) \(pick(stringOps))\(pick(options)) \(pick(patterns))"
        case 3: return "active == \(pick(["YES", "NO", "true", "0"]))"
        case 4: return "founded \(pick(ordering)) \(pick(["nil", "'1990-05-01T00:00:00Z'", "'2001-01-01'", "0"]))"
        case 5:
            return
                "country.name \(pick(["==", "!=", "BEGINSWITH[cd]", "CONTAINS"])) \(pick(["'France'", "'cote'", "'日本'", "nil", "'o'"]))"
        case 6: return "\(pick(["ANY", "ALL", "NONE"])) players.age \(pick(ordering)) \(pick(["20", "30", "nil"]))"
        case 7:
            return "\(pick(["ANY", "ALL", "NONE"])) players.name \(pick(stringOps))\(pick(options)) \(pick(patterns))"
        case 8: return "players.@count \(pick(ordering)) \(pick(["0", "1", "3"]))"
        case 9:
            return
                "players.@\(pick(["sum", "avg", "min", "max"])).age \(pick(ordering)) \(pick(["0", "25", "60", "nil"]))"
        case 10:
            return
                "SUBQUERY(players, $p, $p.age > \(pick(["20", "30"])) AND $p.name CONTAINS[c] 'e').@count \(pick(ordering)) \(pick(["0", "1"]))"
        case 11: return "wins BETWEEN {\(pick(["0", "2"])), \(pick(["3", "6"]))}"
        case 12: return "zone IN {\(pick(patterns)), \(pick(patterns))}"
        case 13: return "\(pick(["TRUEPREDICATE", "FALSEPREDICATE"]))"
        case 14: return "rating \(pick(ordering)) wins"
        case 15:
            return
                "\(pick(["teamName", "zone", "country.name", "ANY players.name", "ALL players.name"])) IN\(pick(options)) \(pick(["'Étoile Zebra eu'", "'under_score 100% 日本'", "'Samurai ETOILE'", "''"]))"
        case 17:
            return
                "\(pick(["ANY", "ALL", "NONE"])) tags.\(pick(["name \(pick(stringOps))\(pick(options)) \(pick(patterns))", "weight \(pick(ordering)) \(pick(["0", "2", "nil"]))"]))"
        case 18:
            return
                "\(pick(["tags.@count", "tags.@sum.weight", "tags.@max.weight", "tags.@avg.weight"])) \(pick(ordering)) \(pick(["0", "1", "3", "nil"]))"
        case 19:
            return
                "SUBQUERY(tags, $t, $t.weight >= \(pick(["1", "3"])) OR $t.name BEGINSWITH[cd] 'e').@count \(pick(ordering)) \(pick(["0", "1"]))"
        case 16:
            return
                "\(pick(patterns + ["zone", "teamName"])) IN\(pick(options)) \(pick(["teamName", "zone", "'zèbre etoile eu'"]))"
        case 20:
            let id = "'Team/\(Int.random(in: 1...42, using: &random))'"
            return "\(pick(["id", "SELF", "self"])) \(pick(["==", "!="])) \(id)"
        case 21:
            func ids(_ entity: String, _ upper: Int) -> String {
                "{'\(entity)/\(Int.random(in: 1...upper, using: &random))', '\(entity)/\(Int.random(in: 1...upper, using: &random))'}"
            }
            switch Int.random(in: 0..<4, using: &random) {
            case 0: return "\(pick(["id", "SELF"])) IN \(ids("Team", 42))"
            case 1: return "\(pick(["country.id", "country.SELF", "country"])) IN \(ids("Country", 3))"
            case 2: return "ANY players.\(pick(["id", "SELF"])) IN \(ids("Player", 90))"
            default: return "SELF.wins \(pick(ordering)) 3"
            }
        default: return "teamName MATCHES\(pick(options)) '\(pick([".*e.*", "[A-Z].*", "É.*", ".*[0-9]"]))'"
        }
    }

    /// An evaluator over the objects `fetch` returns (all of each entity; Team with its `tags`),
    /// and the teams to evaluate predicates on.
    public static func evaluator(fetch: (FetchRequest) throws -> [JSONValue]) throws -> (
        evaluator: PredicateEvaluator, teams: [JSONValue]
    ) {
        let teams = try fetch(FetchRequest(entity: "Team"))
        let players = try fetch(FetchRequest(entity: "Player"))
        let countries = try fetch(FetchRequest(entity: "Country"))
        var byID: [String: [String: JSONValue]] = [:]
        for object in teams + players + countries + (try fetch(FetchRequest(entity: "Tag"))) {
            byID[object["id"]!.stringValue!] = object.objectValue!
        }
        var tagsOfTeam: [String: [[String: JSONValue]]] = [:]
        for team in try fetch(FetchRequest(entity: "Team", properties: ["tags"])) {
            tagsOfTeam[team["id"]!.stringValue!] = (team["tags"]?.arrayValue ?? []).compactMap {
                $0.stringValue.flatMap { byID[$0] }
            }
        }
        var playersOfTeam: [String: [[String: JSONValue]]] = [:]
        for player in players {
            if let team = player["team"]?.stringValue { playersOfTeam[team, default: []].append(player.objectValue!) }
        }
        var teamsOfCountry: [String: [[String: JSONValue]]] = [:]
        for team in teams {
            if let country = team["country"]?.stringValue {
                teamsOfCountry[country, default: []].append(team.objectValue!)
            }
        }
        let evaluator = PredicateEvaluator(model: model, object: { byID[$0] }) { owner, key in
            let id = owner["id"]?.stringValue ?? ""
            if key == "tags" { return tagsOfTeam[id] ?? [] }
            return key == "players" ? playersOfTeam[id] ?? [] : teamsOfCountry[id] ?? []
        }
        return (evaluator, teams)
    }

    /// The ids of the `teams` that `node` matches, by the in-memory evaluator.
    public static func matchingIDs(
        _ node: PredicateNode, in teams: [JSONValue], evaluator: PredicateEvaluator
    ) throws -> Set<String> {
        var ids = Set<String>()
        for team in teams where try evaluator.evaluate(node, on: team.objectValue!, entity: "Team") {
            ids.insert(team["id"]!.stringValue!)
        }
        return ids
    }

    /// What `side`'s answer to `predicate` and the evaluator's disagree on, or `nil` when they agree.
    public static func disagreement(
        _ predicate: String, _ side: String, ids: Set<String>, inMemory: Set<String>
    ) -> String? {
        guard ids != inMemory else { return nil }
        return
            "\(predicate): \(side) only \(ids.subtracting(inMemory).sorted()), evaluator only \(inMemory.subtracting(ids).sorted())"
    }
}
