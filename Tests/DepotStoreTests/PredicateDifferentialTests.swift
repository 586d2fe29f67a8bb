import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// The SQL compiled from a predicate and the in-memory evaluator agree on
/// random data for thousands of random well-typed predicates.
final class PredicateDifferentialTests: XCTestCase {
    func testSQLAndEvaluatorAgree() throws {
        var random = SeededGenerator(seed: 2026)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-diff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("d.sqlite").path)
        _ = try store.defineModel(PredicateTests.model)

        let words = [
            "Étoile", "etoile", "ÉTOILE", "Zebra", "zèbre", "Samurai", "under_score", "100%", "a*b?c", "日本", "", "Eu",
            "eu",
        ]
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
        _ = try store.save(StoreSave.Parameters(inserted: inserted))

        // The object graph the evaluator reads.
        let teams = try store.fetch(FetchRequest(entity: "Team")).objects ?? []
        let players = try store.fetch(FetchRequest(entity: "Player")).objects ?? []
        let countries = try store.fetch(FetchRequest(entity: "Country")).objects ?? []
        var byID: [String: [String: JSONValue]] = [:]
        for object in teams + players + countries { byID[object["id"]!.stringValue!] = object.objectValue! }
        for tag in try store.fetch(FetchRequest(entity: "Tag")).objects ?? [] {
            byID[tag["id"]!.stringValue!] = tag.objectValue!
        }
        var tagsOfTeam: [String: [[String: JSONValue]]] = [:]
        for team in try store.fetch(FetchRequest(entity: "Team", properties: ["tags"])).objects ?? [] {
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
        let evaluator = PredicateEvaluator(model: PredicateTests.model, object: { byID[$0] }) { owner, key in
            let id = owner["id"]?.stringValue ?? ""
            if key == "tags" { return tagsOfTeam[id] ?? [] }
            return key == "players" ? playersOfTeam[id] ?? [] : teamsOfCountry[id] ?? []
        }

        var checked = 0
        var disagreements: [String] = []
        for _ in 0..<2500 {
            let predicate = Self.randomPredicate(depth: 3, &random)
            let node: PredicateNode
            let sqlIDs: Set<String>
            do {
                node = try PredicateParser.parse(predicate)
                sqlIDs = Set(
                    try store.fetch(FetchRequest(entity: "Team", predicate: predicate, resultType: .ids)).ids ?? [])
            } catch {
                disagreements.append("\(predicate): SQL side failed: \(error)")
                continue
            }
            var memoryIDs = Set<String>()
            for team in teams where try evaluator.evaluate(node, on: team.objectValue!, entity: "Team") {
                memoryIDs.insert(team["id"]!.stringValue!)
            }
            checked += 1
            if sqlIDs != memoryIDs {
                disagreements.append(
                    "\(predicate): SQL only \(sqlIDs.subtracting(memoryIDs).sorted()), memory only \(memoryIDs.subtracting(sqlIDs).sorted())"
                )
            }
        }
        XCTAssertEqual(checked, 2500)
        XCTAssertTrue(
            disagreements.isEmpty,
            "\(disagreements.count) disagreements:\n" + disagreements.prefix(15).joined(separator: "\n"))
    }

    static func randomPredicate(depth: Int, _ random: inout SeededGenerator) -> String {
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
            "'ÉT*'", "nil",
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
}
