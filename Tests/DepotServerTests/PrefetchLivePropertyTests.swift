import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// The delta oracle extended to related objects (DESIGN.md §7, Live
/// relationships), in memory: seeded random transactions over to-one, to-many
/// and many-to-many relationships (related objects renamed, relationships
/// re-pointed, members added and removed, related objects deleted under
/// cascade, nullify and deny) against prefetching subscriptions with sections,
/// a window and coalescing, in several sessions. After every transaction each
/// subscription's rows (its first results with every `results/didChange`
/// applied) and its related objects (`related` merged, `relatedRemoved`
/// dropped) equal a fresh `store/fetch` with the same `prefetch`.
final class PrefetchLivePropertyTests: XCTestCase {
    /// The subscriptions: Match rows in sections through a to-one chain and a
    /// many-to-many; Team rows in a window through to-many and many-to-many;
    /// Match rows coalescing through a to-one then a to-many; Player rows through a chain.
    static let subscriptions: [(request: String, extra: String, coalescing: Bool)] = [
        (
            #"{"entity": "Match", "sort": [{"key": "round"}, {"key": "score"}], "prefetch": ["homeTeam.coach", "awayTeam.tags"]}"#,
            #", "sectionKeyPath": "round""#, false
        ),
        (
            #"{"entity": "Team", "sort": [{"key": "teamName"}], "limit": 3, "offset": 1, "prefetch": ["players", "tags.teams", "coach"]}"#,
            "", false
        ),
        (
            #"{"entity": "Match", "predicate": "score >= 2", "sort": [{"key": "score", "ascending": false}], "prefetch": ["homeTeam.players"]}"#,
            #", "coalesceMs": 30"#, true
        ),
        (
            #"{"entity": "Player", "sort": [{"key": "name"}], "properties": ["name"], "prefetch": ["team.coach"]}"#,
            "", false
        ),
    ]

    /// Which subscriptions each session holds (the first twice: one shared set).
    static let sessions: [[UInt8]: [Int]] = [[1]: [0, 1], [2]: [0, 2, 3], [3]: [1, 3]]

    func testRowsAndRelatedObjectsReproduceAFreshFetchAfterEveryTransaction() throws {
        var kinds: [String: Int] = [:]
        for seed in 1...4 { try run(seed: UInt64(seed), kinds: &kinds) }
        for kind in ["insert", "delete", "move", "update", "related", "relatedRemoved", "transactions"] {
            XCTAssertGreaterThan(kinds[kind] ?? 0, 0, "no \(kind) in \(kinds)")
        }
    }

    private func run(seed: UInt64, kinds: inout [String: Int]) throws {
        let core = try CoreCaller(model: PrefetchFixture.model, name: "prefetch-live", label: "seed \(seed)")
        let outbox = core.outbox
        var random = SeededGenerator(seed: seed)
        let writer: [UInt8] = [9]
        /// The result of `method`; `failing` ones may fail (`null` then).
        func call(_ peer: [UInt8], _ method: String, _ params: String, failing: Bool = false) throws -> JSONValue {
            failing ? try core.send(peer, method, params)["result"] ?? .null : try core.call(peer, method, params)
        }
        // Seed: coaches, teams with players and tags, matches.
        var inserted: [String] = []
        for coach in 0..<3 {
            inserted.append(#"{"entity": "Coach", "tempId": "c\#(coach)", "values": {"name": "C\#(coach)"}}"#)
        }
        for tag in 0..<3 {
            inserted.append(#"{"entity": "Tag", "tempId": "g\#(tag)", "values": {"label": "L\#(tag)"}}"#)
        }
        for team in 0..<6 {
            inserted.append(
                #"{"entity": "Team", "tempId": "t\#(team)", "values": {"teamName": "T\#(team)", "zone": "Z\#(team % 2)", "coach": "c\#(team % 3)", "tags": ["g\#(team % 3)"]}}"#
            )
            for player in 0..<2 {
                inserted.append(
                    #"{"entity": "Player", "tempId": "p\#(team)\#(player)", "values": {"name": "P\#(team)\#(player)", "team": "t\#(team)"}}"#
                )
            }
        }
        for match in 0..<10 {
            inserted.append(
                #"{"entity": "Match", "tempId": "m\#(match)", "values": {"round": "R\#(match % 3)", "score": \#(match), "homeTeam": "t\#(match % 6)", "awayTeam": "t\#((match + 2) % 6)"}}"#
            )
        }
        _ = try call(writer, "store/save", #"{"inserted": [\#(inserted.joined(separator: ","))]}"#)

        var held: [[UInt8]: [HeldResults]] = [:]
        for (peer, choices) in Self.sessions.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            _ = try call(peer, "initialize", #"{"protocolVersion": "1"}"#)
            for choice in choices {
                let subscription = Self.subscriptions[choice]
                let result = try call(
                    peer, "results/subscribe",
                    #"{"request": \#(subscription.request), "include": "all"\#(subscription.extra)}"#)
                XCTAssertNotNil(result["related"], "seed \(seed): subscribe answers related")
                held[peer, default: []].append(HeldResults(answer: result))
            }
        }

        func ids(_ entity: String) throws -> [String] {
            try call(writer, "store/fetch", #"{"entity": "\#(entity)", "resultType": "ids"}"#)["ids"]?.arrayValue?
                .compactMap(\.stringValue) ?? []
        }
        func check(step: Int, final: Bool) throws {
            for (peer, choices) in Self.sessions {
                for (slot, choice) in choices.enumerated() {
                    if Self.subscriptions[choice].coalescing {
                        guard final else { continue }
                        // A snapshot announces an open window first.
                        _ = try call(
                            peer, "results/snapshot", #"{"subscription": "\#(held[peer]![slot].subscription)"}"#)
                    }
                    var state = held[peer]![slot]
                    let problem = state.catchUp(with: outbox.received(by: peer)) { change in
                        for object in change["objects"]?.arrayValue ?? [] {
                            kinds[object["type"]?.stringValue ?? "", default: 0] += 1
                        }
                        if !(change["related"]?.objectValue ?? [:]).isEmpty { kinds["related", default: 0] += 1 }
                        if change["relatedRemoved"] != nil { kinds["relatedRemoved", default: 0] += 1 }
                        if change["transactions"] != nil { kinds["transactions", default: 0] += 1 }
                    }
                    if let problem { XCTFail("seed \(seed) step \(step): \(problem)") }
                    held[peer]![slot] = state
                    let fresh = try call(writer, "store/fetch", Self.subscriptions[choice].request)
                    let rows = state.sections.flatMap { $0 }
                    XCTAssertEqual(
                        rows.map(\.object), fresh["objects"]?.arrayValue ?? [],
                        "seed \(seed) step \(step) subscription \(choice) of peer \(peer): rows")
                    let expected = fresh["related"]?.objectValue ?? [:]
                    XCTAssertEqual(
                        Set(state.related.keys), Set(expected.keys),
                        "seed \(seed) step \(step) subscription \(choice) of peer \(peer): related ids")
                    for (id, object) in expected where state.related[id] != object {
                        XCTFail(
                            "seed \(seed) step \(step) subscription \(choice) of peer \(peer): \(id) held \(state.related[id] ?? .null), fresh \(object)"
                        )
                    }
                }
            }
        }

        func pick<T>(_ choices: [T]) -> T { choices.randomElement(using: &random)! }
        for step in 0..<40 {
            let roll = Int.random(in: 0..<100, using: &random)
            let teams = try ids("Team")
            let teamOrNull = teams.map { "\"\($0)\"" } + ["null"]
            switch roll {
            case 0..<12:
                // Rename a related object.
                let entity = pick(["Team", "Coach", "Tag", "Player"])
                let key = ["Team": "teamName", "Coach": "name", "Tag": "label", "Player": "name"][entity]!
                if let id = try ids(entity).randomElement(using: &random) {
                    _ = try call(
                        writer, "store/save",
                        #"{"updated": [{"id": "\#(id)", "values": {"\#(key)": "\#(entity.prefix(1))\#(step)x"}}]}"#)
                }
            case 12..<24:
                // Re-point a match.
                if let match = try ids("Match").randomElement(using: &random) {
                    let key = pick(["homeTeam", "awayTeam"])
                    _ = try call(
                        writer, "store/save",
                        #"{"updated": [{"id": "\#(match)", "values": {"\#(key)": \#(pick(teamOrNull))}}]}"#)
                }
            case 24..<32:
                // A team's coach, or a player's team.
                if roll < 28, let team = teams.randomElement(using: &random) {
                    let coach = pick(try ids("Coach").map { "\"\($0)\"" } + ["null"])
                    _ = try call(
                        writer, "store/save", #"{"updated": [{"id": "\#(team)", "values": {"coach": \#(coach)}}]}"#)
                } else if let player = try ids("Player").randomElement(using: &random) {
                    _ = try call(
                        writer, "store/save",
                        #"{"updated": [{"id": "\#(player)", "values": {"team": \#(pick(teamOrNull))}}]}"#)
                }
            case 32..<44:
                // Tags added to and removed from a team (many-to-many).
                if let team = teams.randomElement(using: &random) {
                    let tags = try ids("Tag")
                    let add = tags.filter { _ in Bool.random(using: &random) }.map { "\"\($0)\"" }
                    let remove = tags.filter { _ in Bool.random(using: &random) }.map { "\"\($0)\"" }
                    _ = try call(
                        writer, "store/save",
                        #"{"updated": [{"id": "\#(team)", "values": {"tags": {"add": [\#(add.joined(separator: ","))], "remove": [\#(remove.joined(separator: ","))]}}}]}"#
                    )
                }
            case 44..<54:
                // Delete a related object: a team (cascades to players, nullifies matches and tags),
                // a player, a tag, or a coach (denied while it coaches a team).
                let entity = pick(["Team", "Player", "Tag", "Coach"])
                if let id = try ids(entity).randomElement(using: &random) {
                    _ = try call(writer, "store/save", #"{"deleted": [{"id": "\#(id)"}]}"#, failing: entity == "Coach")
                }
            case 54..<70:
                // New objects.
                let n = step
                _ = try call(
                    writer, "store/save",
                    #"{"inserted": [{"entity": "Team", "tempId": "t", "values": {"teamName": "N\#(n)", "zone": "Z0", "tags": ["\#(pick(try ids("Tag")) )"]}}, {"entity": "Player", "values": {"name": "Q\#(n)", "team": "t"}}, {"entity": "Match", "values": {"round": "R\#(n % 3)", "score": \#(n % 7), "homeTeam": "t", "awayTeam": \#(pick(teamOrNull))}}, {"entity": "Tag", "values": {"label": "G\#(n)"}}, {"entity": "Coach", "values": {"name": "K\#(n)"}}]}"#,
                    failing: true)
            case 70..<85:
                // A row's own values (sort and section keys).
                if let match = try ids("Match").randomElement(using: &random) {
                    _ = try call(
                        writer, "store/save",
                        #"{"updated": [{"id": "\#(match)", "values": {"score": \#(Int.random(in: 0..<12, using: &random)), "round": "R\#(Int.random(in: 0..<3, using: &random))"}}]}"#
                    )
                }
            default:
                // Delete a match.
                if let match = try ids("Match").randomElement(using: &random) {
                    _ = try call(writer, "store/save", #"{"deleted": [{"id": "\#(match)"}]}"#)
                }
            }
            try check(step: step, final: false)
        }
        try check(step: 40, final: true)
    }

    /// A save that no live graph reaches notifies no set (DESIGN.md §7: it costs
    /// those sets nothing): random renames of related objects and of objects of
    /// entities no prefetch names; each is checked against fresh fetches of every
    /// subscription (rows and related ids) to know whether any graph reaches it,
    /// and a save that reaches none sends no `results/didChange` at all.
    func testASaveReachingNoLiveGraphNotifiesNoSet() throws {
        let core = try CoreCaller(model: PrefetchFixture.model, name: "prefetch-quiet")
        let outbox = core.outbox
        var random = SeededGenerator(seed: 35)
        let writer: [UInt8] = [9]
        func call(_ peer: [UInt8], _ method: String, _ params: String) throws -> JSONValue {
            try core.call(peer, method, params)
        }
        var inserted: [String] = []
        for coach in 0..<4 { inserted.append(#"{"entity": "Coach", "values": {"name": "C\#(coach)"}}"#) }
        for tag in 0..<4 { inserted.append(#"{"entity": "Tag", "values": {"label": "L\#(tag)"}}"#) }
        for team in 0..<8 {
            inserted.append(
                #"{"entity": "Team", "tempId": "t\#(team)", "values": {"teamName": "T\#(team)", "zone": "Z"}}"#)
            inserted.append(#"{"entity": "Player", "values": {"name": "P\#(team)", "team": "t\#(team)"}}"#)
        }
        // Matches show only the first three teams: the other teams, their players, the coaches and tags are out of every graph.
        for match in 0..<4 {
            inserted.append(
                #"{"entity": "Match", "values": {"round": "R", "score": \#(match), "homeTeam": "t\#(match % 3)", "awayTeam": "t\#((match + 1) % 3)"}}"#
            )
        }
        _ = try call(writer, "store/save", #"{"inserted": [\#(inserted.joined(separator: ","))]}"#)
        let requests = [
            #"{"entity": "Match", "sort": [{"key": "score"}], "prefetch": ["homeTeam.players"]}"#,
            #"{"entity": "Match", "sort": [{"key": "score"}], "limit": 2, "prefetch": ["awayTeam"]}"#,
        ]
        let peers: [[UInt8]] = [[1], [2]]
        var subscriptions: [String] = []
        for (peer, request) in zip(peers, requests) {
            _ = try call(peer, "initialize", #"{"protocolVersion": "1"}"#)
            let subscribed = try call(peer, "results/subscribe", #"{"request": \#(request), "include": "all"}"#)
            subscriptions.append(subscribed["subscription"]?.stringValue ?? "")
        }
        var quiet = 0
        var heard = 0
        for step in 0..<30 {
            let entity = ["Team", "Player", "Coach", "Tag"].randomElement(using: &random)!
            let key = ["Team": "teamName", "Coach": "name", "Tag": "label", "Player": "name"][entity]!
            let ids =
                try call(writer, "store/fetch", #"{"entity": "\#(entity)", "resultType": "ids"}"#)["ids"]?.arrayValue?
                .compactMap(\.stringValue) ?? []
            let id = ids.randomElement(using: &random)!
            var reached = false
            for request in requests {
                let fresh = try call(writer, "store/fetch", request)
                if fresh["related"]?[id] != nil { reached = true }
            }
            let before = peers.map { outbox.received(by: $0).count }
            _ = try call(writer, "store/save", #"{"updated": [{"id": "\#(id)", "values": {"\#(key)": "x\#(step)"}}]}"#)
            // A snapshot is answered in the session's stream after every notification published before it.
            for (peer, subscription) in zip(peers, subscriptions) {
                _ = try call(peer, "results/snapshot", #"{"subscription": "\#(subscription)"}"#)
            }
            let notified = zip(peers, before).flatMap { peer, count in
                outbox.received(by: peer)[count...].filter { $0["method"] == "results/didChange" }
            }
            if reached {
                heard += 1
                XCTAssertFalse(notified.isEmpty, "step \(step): \(id) is shown, yet no set heard of it")
            } else {
                quiet += 1
                XCTAssertEqual(notified.count, 0, "step \(step): \(id) reaches no live graph: \(notified)")
            }
        }
        XCTAssertGreaterThan(quiet, 5)
        XCTAssertGreaterThan(heard, 2)
    }

    /// A notification carries every related object new to the client or changed (DESIGN.md §7),
    /// and a rename shown by rows that did not change themselves carries the renamed team alone
    /// (not the other objects those rows show, which the client holds with the rows).
    func testNotificationsCarryOnlyNewOrChangedRelatedObjects() throws {
        let peer: [UInt8] = [1]
        let core = try CoreCaller(model: PrefetchFixture.model, name: "prefetch-dirty", peers: [peer])
        let saved = try core.call(
            peer,
            "store/save",
            #"{"inserted": [{"entity": "Team", "tempId": "a", "values": {"teamName": "A", "zone": "Z"}}, {"entity": "Team", "tempId": "b", "values": {"teamName": "B", "zone": "Z"}}, {"entity": "Team", "tempId": "c", "values": {"teamName": "C", "zone": "Z"}}, {"entity": "Match", "tempId": "m0", "values": {"round": "R", "score": 0, "homeTeam": "a"}}, {"entity": "Match", "tempId": "m1", "values": {"round": "R", "score": 1, "homeTeam": "b"}}]}"#
        )
        func id(_ tempID: String) -> String { saved["ids"]?[tempID]?.stringValue ?? "" }
        let request = #"{"entity": "Match", "sort": [{"key": "score"}], "prefetch": ["homeTeam"]}"#
        let answer = try core.call(peer, "results/subscribe", #"{"request": \#(request), "include": "all"}"#)
        var held = answer["related"]?.objectValue ?? [:]
        XCTAssertEqual(Set(held.keys), [id("a"), id("b")])
        var sentSome = false
        for (step, save) in [
            #"{"updated": [{"id": "\#(id("m0"))", "values": {"score": 5}}]}"#,
            #"{"updated": [{"id": "\#(id("m0"))", "values": {"homeTeam": "\#(id("b"))"}}]}"#,
            #"{"updated": [{"id": "\#(id("b"))", "values": {"teamName": "Bee"}}]}"#,
            #"{"updated": [{"id": "\#(id("m1"))", "values": {"homeTeam": "\#(id("c"))"}}]}"#,
            #"{"updated": [{"id": "\#(id("c"))", "values": {"zone": "Y"}}, {"id": "\#(id("m0"))", "values": {"score": 7}}]}"#,
        ].enumerated() {
            _ = try core.call(peer, "store/save", save)
            let change = try XCTUnwrap(
                core.outbox.received(by: peer).last { $0["method"] == "results/didChange" }?["params"])
            let sent = change["related"]?.objectValue ?? [:]
            let fresh = try core.call(peer, "store/fetch", request)["related"]?.objectValue ?? [:]
            let expected = Set(fresh.keys.filter { held[$0] != fresh[$0] })
            XCTAssertTrue(
                expected.isSubset(of: Set(sent.keys)), "step \(step): \(expected) new or changed, \(sent.keys) sent")
            if step == 2 { XCTAssertEqual(Set(sent.keys), [id("b")], "a rename carries the renamed team alone") }
            sentSome = sentSome || !sent.isEmpty
            held.merge(sent) { _, new in new }
            for removed in change["relatedRemoved"]?.arrayValue ?? [] { held[removed.stringValue ?? ""] = nil }
            XCTAssertEqual(held, fresh, "step \(step): the held related objects are a fresh fetch's")
        }
        XCTAssertTrue(sentSome)
    }
}
