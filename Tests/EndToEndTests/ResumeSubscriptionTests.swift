import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// Resumed subscriptions (DESIGN.md §7, Resuming) against a real daemon: a client holds the
/// results of a request as of transaction T, goes away, random transactions commit, and it
/// subscribes again with `resume`. Rebuilding from the rows the answer names gives exactly what
/// a fresh subscribe gives: ids, sections and every object's values.
final class ResumeSubscriptionTests: XCTestCase {
    /// What a client holds of a subscription: its layout, each row's values, the transaction.
    struct Held {
        var layout: ResultsLayout
        var values: [String: JSONValue]
        var transaction: Int64
    }

    static let model = ModelDefine.Parameters(entities: [
        EntityDescription(
            name: "Country", attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [
                RelationshipDescription(name: "teams", destination: "Team", toMany: true, inverse: "country")
            ]),
        EntityDescription(
            name: "Team",
            attributes: [
                AttributeDescription(name: "teamName", type: .string),
                AttributeDescription(name: "wins", type: .integer),
                AttributeDescription(name: "zone", type: .string),
            ],
            relationships: [
                RelationshipDescription(name: "country", destination: "Country", inverse: "teams"),
                RelationshipDescription(name: "players", destination: "Player", toMany: true, inverse: "team"),
            ]),
        EntityDescription(
            name: "Player",
            attributes: [
                AttributeDescription(name: "name", type: .string), AttributeDescription(name: "age", type: .integer),
            ],
            relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")]),
    ])

    /// The requests resumed: a filter, sections, a predicate and a sort through relationships,
    /// a window, and a grouped request with a window of its own.
    static let requests: [(request: FetchRequest, section: String?)] = [
        (
            FetchRequest(
                entity: "Team", predicate: "wins > 3",
                sort: [SortDescriptor(key: "wins", ascending: false), SortDescriptor(key: "teamName")]), nil
        ),
        (FetchRequest(entity: "Team", sort: [SortDescriptor(key: "zone"), SortDescriptor(key: "teamName")]), "zone"),
        (FetchRequest(entity: "Team", predicate: "ANY players.age > 29", sort: [SortDescriptor(key: "teamName")]), nil),
        (
            FetchRequest(entity: "Team", sort: [SortDescriptor(key: "country.name"), SortDescriptor(key: "teamName")]),
            "country.name"
        ),
        (
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "wins", ascending: false), SortDescriptor(key: "teamName")],
                limit: 5, offset: 2), nil
        ),
        (
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "zone")], groupBy: ["zone"],
                aggregates: [
                    ExpressionDescription(name: "teams", function: .count),
                    ExpressionDescription(name: "wins", function: .sum, key: "wins"),
                ]), nil
        ),
        (
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "wins", ascending: false)], limit: 3, groupBy: ["zone"],
                aggregates: [ExpressionDescription(name: "wins", function: .sum, key: "wins")]), nil
        ),
    ]

    /// Random transactions while the client is away; each resume equals a fresh subscribe.
    func testResumedResultsEqualAFreshSubscribe() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        // Another session keeps the first request's set live: resumes of it share that set.
        let other = try await daemon.connect(name: "other")
        _ = try await client.call(ModelDefine.self, Self.model)
        var world = World(seed: 36)
        try await world.populate(client)
        _ = try await other.call(
            ResultsSubscribe.self, .init(request: Self.requests[0].request, include: .noObjects))

        var held: [Held] = []
        for (request, section) in Self.requests {
            held.append(try await fresh(client, request: request, section: section))
        }
        var resumed = [Int](repeating: 0, count: Self.requests.count)
        var named = 0
        var rows = 0
        for round in 0..<14 {
            // Some rounds only insert and change values: grouped requests resume after those.
            try await world.change(client, steps: 1 + round % 4, gentle: round % 3 == 0)
            for (index, (request, section)) in Self.requests.enumerated() {
                let answer = try await client.call(
                    ResultsSubscribe.self,
                    .init(
                        request: request, sectionKeyPath: section, include: .all,
                        resume: ResultsResume(
                            transaction: held[index].transaction, digest: ResultsDigest.of(held[index].layout.ids))))
                let now = try await fresh(client, request: request, section: section)
                XCTAssertEqual(answer.digest, ResultsDigest.of(now.layout.ids), "request \(index), round \(round)")
                let rebuilt: Held
                if answer.resumed == true {
                    resumed[index] += 1
                    named += answer.changed?.count ?? 0
                    rows += now.layout.count
                    XCTAssertEqual(answer.objects, [], "a resumed answer carries its objects in changed")
                    rebuilt = try Self.rebuild(held[index], with: answer)
                } else {
                    XCTAssertEqual(answer.resumed, false)
                    XCTAssertNotNil(request.groupBy, "only grouped requests fall back while history reaches back")
                    rebuilt = try await Self.held(client, answer)
                }
                XCTAssertEqual(
                    rebuilt.layout.sections, now.layout.sections, "request \(index), round \(round): ids and sections")
                XCTAssertEqual(rebuilt.values, now.values, "request \(index), round \(round): values")
                XCTAssertEqual(rebuilt.transaction, now.transaction)
                _ = try await client.call(ResultsUnsubscribe.self, .init(subscription: answer.subscription))
                held[index] = now
            }
        }
        for (index, count) in resumed.enumerated() {
            XCTAssertGreaterThan(count, 0, "request \(index) resumed at least once")
        }
        XCTAssertEqual(resumed.prefix(5).reduce(0, +), 5 * 14, "every object request resumed every time")
        XCTAssertLessThan(named, rows, "the answers named fewer rows than the results hold")
    }

    /// A digest that differs (held results the daemon's answer does not rebuild) is caught by
    /// the client, which then reads the new subscription in full: the results are right.
    func testDigestMismatchFallsBackToTheFullResults() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(ModelDefine.self, Self.model)
        var world = World(seed: 7)
        try await world.populate(client)
        let (request, section) = Self.requests[1]
        var held = try await fresh(client, request: request, section: section)
        try await world.change(client, steps: 3, gentle: false)
        // The client's copy went wrong while away: two rows swapped.
        var ids = held.layout.sections[0].ids
        ids.swapAt(0, 1)
        held.layout.sections[0].ids = ids
        let answer = try await client.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: section, include: .all,
                resume: ResultsResume(transaction: held.transaction, digest: ResultsDigest.of(held.layout.ids))))
        XCTAssertEqual(answer.resumed, true)
        let rebuilt = try Self.rebuild(held, with: answer)
        XCTAssertNotEqual(ResultsDigest.of(rebuilt.layout.ids), answer.digest, "the client sees the mismatch")
        // The fallback: the subscription is live, its snapshot and objects are the full results.
        let snapshot = try await client.call(ResultsSnapshot.self, .init(subscription: answer.subscription))
        let layout = try ResultsLayout(snapshot: snapshot)
        XCTAssertEqual(ResultsDigest.of(layout.ids), answer.digest)
        let now = try await fresh(client, request: request, section: section)
        XCTAssertEqual(layout.sections, now.layout.sections)
    }

    /// Where history no longer reaches back to T, or T is ahead of the store, the answer is a
    /// full one; a malformed digest is refused naming the field.
    func testPrunedHistoryAnswersInFull() async throws {
        let daemon = try Daemon(arguments: ["--history-retention", "10"])
        let client = try await daemon.connect()
        _ = try await client.call(ModelDefine.self, Self.model)
        var world = World(seed: 11)
        try await world.populate(client)
        let (request, section) = Self.requests[0]
        let held = try await fresh(client, request: request, section: section)
        // History keeps the last 10 transactions, pruned every 64 commits.
        for _ in 0..<130 { try await world.change(client, steps: 1, gentle: true) }
        let answer = try await client.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: section, include: .all,
                resume: ResultsResume(transaction: held.transaction, digest: ResultsDigest.of(held.layout.ids))))
        XCTAssertEqual(answer.resumed, false)
        XCTAssertNil(answer.changed)
        let full = try await Self.held(client, answer)
        let now = try await fresh(client, request: request, section: section)
        XCTAssertEqual(full.layout.sections, now.layout.sections)
        XCTAssertEqual(full.values, now.values)
        XCTAssertEqual(answer.digest, ResultsDigest.of(now.layout.ids))

        let ahead = try await client.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: section, include: .noObjects,
                resume: ResultsResume(transaction: now.transaction + 5, digest: ResultsDigest.of(now.layout.ids))))
        XCTAssertEqual(ahead.resumed, false, "a transaction ahead of the store is not resumed")

        let recent = try await client.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: section, include: .all,
                resume: ResultsResume(transaction: now.transaction, digest: ResultsDigest.of(now.layout.ids))))
        XCTAssertEqual(recent.resumed, true, "nothing changed since: resumed, naming nothing")
        XCTAssertEqual(recent.changed, [])

        let refused = await assertServerError(.invalidParams) {
            try await client.call(
                ResultsSubscribe.self, .init(request: request, resume: ResultsResume(transaction: 1, digest: "ABC")))
        }
        XCTAssertEqual(refused?.data?["field"], "params.resume.digest")
    }

    /// The Swift controller's warm start resumes a grouped request from its file: only the
    /// groups that changed come, and the groups equal a fresh controller's.
    func testGroupedControllerResumesFromItsFile() async throws {
        let daemon = try Daemon()
        let connection = try await daemon.connect()
        _ = try await connection.call(ModelDefine.self, Self.model)
        var world = World(seed: 3)
        try await world.populate(connection)
        let request = Self.requests[5].request
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-resume-\(UUID()).sqlite")
        defer { try? FileManager.default.removeItem(at: file) }
        let first = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        try await first.performFetch()
        await first.unsubscribe()
        // Away: a new team and new wins (each changed member's group is known from history).
        try await world.change(connection, steps: 3, gentle: true)

        let again = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, persistentStore: file)
        try await again.performFetch()
        XCTAssertEqual(again.lastCatchUp?.resynced, false, "resumed from the file")
        XCTAssertLessThan(again.lastCatchUp?.objectsFetched ?? .max, 4, "only the changed groups came")
        let fresh = FetchedResultsController<DepotObject>(fetchRequest: request, connection: connection)
        try await fresh.performFetch()
        XCTAssertEqual(again.fetchedIDs, fresh.fetchedIDs)
        XCTAssertEqual(again.fetchedObjects?.map(\.values), fresh.fetchedObjects?.map(\.values))
        await again.unsubscribe()
        await fresh.unsubscribe()
    }

    /// A key's scope decides membership (DESIGN.md §2): rows entering and leaving it while the
    /// client is away (shared flipped, owner changed) are named, and the resumed results equal a
    /// fresh subscribe by the same key.
    func testScopedResultsResume() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-resume-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try CurveKeyPair.generate()
        let keys = ["alice": try CurveKeyPair.generate(), "admin": try CurveKeyPair.generate()]
        try "\(server.secretKey)\n".write(
            to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        try "\(keys["alice"]!.publicKey) member alice\n\(keys["admin"]!.publicKey) admin admin\n".write(
            to: directory.appendingPathComponent("keys"), atomically: true, encoding: .utf8)
        try #"""
        {"roles": {"member": {"base": "write", "entities": {
          "Note": {"read": "owner == $keyName OR shared == YES", "write": "owner == $keyName"}}}}}
        """#.write(to: directory.appendingPathComponent("policy.json"), atomically: true, encoding: .utf8)
        try #"""
        {"entities": [{"name": "Note", "attributes": [{"name": "title", "type": "string"},
          {"name": "owner", "type": "string"}, {"name": "shared", "type": "boolean", "default": false}]}]}
        """#.write(to: directory.appendingPathComponent("model.json"), atomically: true, encoding: .utf8)
        let daemon = try Daemon(
            dataDirectory: directory.appendingPathComponent("data"),
            arguments: [
                "--curve-secret-key", directory.appendingPathComponent("server.key").path,
                "--authorized-keys", directory.appendingPathComponent("keys").path,
                "--policy", directory.appendingPathComponent("policy.json").path,
                "--model", directory.appendingPathComponent("model.json").path,
            ])
        defer { _ = daemon.stop() }
        func connect(_ name: String) async throws -> DepotConnection {
            try await DepotConnection.connect(
                to: daemon.endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(10),
                keys: try ClientKeys(serverKey: server.publicKey, secretKey: keys[name]!.secretKey))
        }
        let admin = try await connect("admin")
        let alice = try await connect("alice")
        defer { [admin, alice].forEach { $0.abort() } }
        var random = SeededGenerator(seed: 2)
        var notes: [String] = []
        for round in 0..<6 {
            let inserted = (0..<6).map { index in
                InsertedObject(
                    entity: "Note",
                    values: [
                        "title": .string("n\(round)-\(index)"),
                        "owner": .string(["alice", "bob", "carol"].randomElement(using: &random)!),
                        "shared": .bool(Bool.random(using: &random)),
                    ])
            }
            notes += try await admin.call(StoreSave.self, .init(inserted: inserted)).versions.keys
        }
        let request = FetchRequest(entity: "Note", sort: [SortDescriptor(key: "title")])
        var held = try await fresh(alice, request: request, section: nil)
        XCTAssertLessThan(held.layout.count, notes.count, "alice sees only her scope")
        for round in 0..<5 {
            // Away: notes enter and leave alice's scope, and one goes.
            var updated: [UpdatedObject] = []
            for id in Set((0..<4).map { _ in notes.randomElement(using: &random)! }) {
                updated.append(
                    Bool.random(using: &random)
                        ? UpdatedObject(id: id, values: ["shared": .bool(Bool.random(using: &random))])
                        : UpdatedObject(
                            id: id, values: ["owner": .string(["alice", "bob"].randomElement(using: &random)!)]))
            }
            let gone = notes.removeLast()
            _ = try await admin.call(
                StoreSave.self, .init(updated: updated.filter { $0.id != gone }, deleted: [DeletedObject(id: gone)]))
            let answer = try await alice.call(
                ResultsSubscribe.self,
                .init(
                    request: request, include: .all,
                    resume: ResultsResume(transaction: held.transaction, digest: ResultsDigest.of(held.layout.ids))))
            XCTAssertEqual(answer.resumed, true, "round \(round)")
            let rebuilt = try Self.rebuild(held, with: answer)
            let now = try await fresh(alice, request: request, section: nil)
            XCTAssertEqual(rebuilt.layout.sections, now.layout.sections, "round \(round)")
            XCTAssertEqual(rebuilt.values, now.values, "round \(round)")
            _ = try await alice.call(ResultsUnsubscribe.self, .init(subscription: answer.subscription))
            held = now
        }
    }

    // MARK: Helpers

    /// A fresh subscription's results (then unsubscribed).
    private func fresh(_ client: DepotConnection, request: FetchRequest, section: String?) async throws -> Held {
        let result = try await client.call(
            ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
        let held = try await Self.held(client, result)
        _ = try await client.call(ResultsUnsubscribe.self, .init(subscription: result.subscription))
        return held
    }

    /// What a full answer (include all) holds, its ids from the subscription's snapshot.
    static func held(_ client: DepotConnection, _ result: ResultsSubscribe.Result) async throws -> Held {
        let snapshot = try await client.call(ResultsSnapshot.self, .init(subscription: result.subscription))
        XCTAssertEqual(snapshot.seq, 0, "nothing committed meanwhile")
        let layout = try ResultsLayout(snapshot: snapshot)
        XCTAssertEqual(result.objects.count, snapshot.ids.count)
        return Held(
            layout: layout, values: Dictionary(uniqueKeysWithValues: zip(snapshot.ids, result.objects)),
            transaction: result.transaction)
    }

    /// The results a resumed answer describes, rebuilt from `held`; checks the digest.
    static func rebuild(_ held: Held, with answer: ResultsSubscribe.Result) throws -> Held {
        let layout = try ResultsLayout(resuming: held.layout, with: answer)
        var values = held.values
        for row in answer.changed ?? [] {
            values[row.id] = nil
            if row.indexPath != nil {
                XCTAssertNotNil(row.object, "include all: \(row.id) carries its values")
                values[row.id] = row.object
            }
        }
        let present = Set(layout.ids)
        values = values.filter { present.contains($0.key) }
        return Held(layout: layout, values: values, transaction: answer.transaction)
    }
}

/// The store's objects as the test created them, and random transactions on them.
private struct World {
    var random: SeededGenerator
    var countries: [String] = []
    var teams: [String] = []
    var players: [String] = []
    let zones = ["Africa", "Asia", "Europe", "Oceania"]

    init(seed: UInt64) { random = SeededGenerator(seed: seed) }

    mutating func populate(_ client: DepotConnection) async throws {
        var inserted: [InsertedObject] = []
        for (index, name) in ["France", "Brazil", "Japan", "Ghana"].enumerated() {
            inserted.append(InsertedObject(entity: "Country", tempId: "c\(index)", values: ["name": .string(name)]))
        }
        for index in 0..<24 {
            inserted.append(
                InsertedObject(
                    entity: "Team", tempId: "t\(index)",
                    values: [
                        "teamName": .string("Team \(index)"), "wins": .int(Int64.random(in: 0..<9, using: &random)),
                        "zone": .string(zones.randomElement(using: &random)!),
                        "country": .string("c\(Int.random(in: 0..<4, using: &random))"),
                    ]))
        }
        for index in 0..<30 {
            inserted.append(
                InsertedObject(
                    entity: "Player", tempId: "p\(index)",
                    values: [
                        "name": .string("Player \(index)"), "age": .int(Int64.random(in: 18..<36, using: &random)),
                        "team": .string("t\(Int.random(in: 0..<24, using: &random))"),
                    ]))
        }
        let saved = try await client.call(StoreSave.self, .init(inserted: inserted))
        countries = (0..<4).compactMap { saved.ids["c\($0)"] }
        teams = (0..<24).compactMap { saved.ids["t\($0)"] }
        players = (0..<30).compactMap { saved.ids["p\($0)"] }
    }

    /// `steps` random transactions; `gentle` ones only insert teams and change wins and ages.
    mutating func change(_ client: DepotConnection, steps: Int, gentle: Bool) async throws {
        for _ in 0..<steps {
            let kind = gentle ? [0, 2, 6].randomElement(using: &random)! : Int.random(in: 0..<9, using: &random)
            let team = teams.randomElement(using: &random)!
            let player = players.randomElement(using: &random)!
            let country = countries.randomElement(using: &random)!
            var save = StoreSave.Parameters()
            switch kind {
            case 0:
                save.inserted = [
                    InsertedObject(
                        entity: "Team", tempId: "new",
                        values: [
                            "teamName": .string("Team \(teams.count + Int.random(in: 100..<999, using: &random))"),
                            "wins": .int(Int64.random(in: 0..<9, using: &random)),
                            "zone": .string(zones.randomElement(using: &random)!), "country": .string(country),
                        ])
                ]
            case 1 where teams.count > 8:
                save.deleted = [DeletedObject(id: team)]
                teams.removeAll { $0 == team }
            case 2:
                save.updated = [
                    UpdatedObject(id: team, values: ["wins": .int(Int64.random(in: 0..<9, using: &random))])
                ]
            case 3:
                save.updated = [
                    UpdatedObject(id: team, values: ["zone": .string(zones.randomElement(using: &random)!)])
                ]
            case 4: save.updated = [UpdatedObject(id: team, values: ["country": .string(country)])]
            case 5:
                save.updated = [
                    UpdatedObject(
                        id: country, values: ["name": .string("Land \(Int.random(in: 0..<99, using: &random))")])
                ]
            case 6:
                save.updated = [
                    UpdatedObject(id: player, values: ["age": .int(Int64.random(in: 18..<36, using: &random))])
                ]
            case 7: save.updated = [UpdatedObject(id: player, values: ["team": .string(team)])]
            default:
                save.updated = [
                    UpdatedObject(id: team, values: ["wins": .int(Int64.random(in: 0..<9, using: &random))]),
                    UpdatedObject(id: player, values: ["age": .int(Int64.random(in: 18..<36, using: &random))]),
                ]
            }
            let result = try await client.call(StoreSave.self, save)
            if let id = result.ids["new"] { teams.append(id) }
        }
    }
}
