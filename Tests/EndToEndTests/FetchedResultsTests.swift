import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Fetched results end to end: every notification, applied to the old
/// results, gives exactly a fresh fetch (the delta oracle).
final class FetchedResultsTests: XCTestCase {
    static let byZone = FetchRequest(
        entity: "Team",
        sort: [
            SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false),
            SortDescriptor(key: "teamName"),
        ])

    func subscribe(_ client: DepotConnection, _ request: FetchRequest, section: String? = nil) async throws
        -> ResultsMirror
    {
        let result = try await client.call(
            ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
        let mirror = ResultsMirror(result, request: request, sectionKeyPath: section)
        try await mirror.assertMatchesFreshFetch(client)
        return mirror
    }

    func testWorldCupScenario() async throws {
        let daemon = try Daemon()
        let watcher = try await daemon.connect(name: "watcher")
        let editor = try await daemon.connect(name: "editor")
        let ids = try await editor.loadWorldCup()
        let collector = ChangeCollector(watcher)
        var mirror = try await subscribe(watcher, Self.byZone, section: "qualifyingZone")
        XCTAssertEqual(mirror.sections.map(\.name), ["Africa", "Asia", "Europe", "North America", "South America"])

        // A win moves a team within its section.
        let japan = ids["Japan"]!
        var save = try await editor.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["wins": 3])]))
        var change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(change.transaction, save.transaction)
        XCTAssertEqual(change.objects.map(\.type), [.move])
        XCTAssertEqual(change.objects[0].indexPath?[0], change.objects[0].newIndexPath?[0], "same section")
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(watcher)

        // A new zone inserts a section; emptying one deletes it.
        save = try await editor.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["qualifyingZone": "Oceania"])]))
        change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(change.sections, [SectionChange(type: .insert, index: 4, name: "Oceania")])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(watcher)
        save = try await editor.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["qualifyingZone": "Asia"])]))
        change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(change.sections, [SectionChange(type: .delete, index: 4, name: "Oceania")])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(watcher)

        // A change to a key that neither sorts nor sections is an update in place.
        _ = try await editor.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["imageName": "jp.png"])]))
        change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(change.objects.map(\.type), [.update])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(watcher)

        // Inserts and deletes in one save.
        _ = try await editor.call(
            StoreSave.self,
            .init(
                inserted: [
                    InsertedObject(
                        entity: "Team", values: ["teamName": "Wakanda", "qualifyingZone": "Africa", "wins": 9])
                ],
                deleted: [DeletedObject(id: ids["Brazil"]!)]))
        change = try await collector.expect(for: mirror.subscription)
        XCTAssertEqual(Set(change.objects.map(\.type)), [.insert, .delete])
        mirror.apply(change)
        try await mirror.assertMatchesFreshFetch(watcher)

        // Unsubscribe stops deltas.
        _ = try await watcher.call(ResultsUnsubscribe.self, .init(subscription: mirror.subscription))
        _ = try await editor.call(StoreSave.self, .init(updated: [UpdatedObject(id: japan, values: ["wins": 4])]))
        let none = await collector.next(for: mirror.subscription, timeout: .milliseconds(300))
        XCTAssertNil(none)
    }

    func testNotificationsPrecedeTheSaveResponseAndPagesWork() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        let ids = try await client.loadWorldCup()
        let collector = ChangeCollector(client)
        let result = try await client.call(
            ResultsSubscribe.self, .init(request: Self.byZone, sectionKeyPath: "qualifyingZone", include: .noObjects))
        XCTAssertEqual(result.count, 32)
        XCTAssertTrue(result.objects.isEmpty)
        let page = try await client.call(
            ResultsObjects.self, .init(subscription: result.subscription, offset: 30, length: 10))
        XCTAssertEqual(page.objects.count, 2)
        let all = try await client.call(StoreFetch.self, Self.byZone)
        XCTAssertEqual(page.objects, Array(all.objects!.suffix(2)))
        let save = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Chile"]!, values: ["wins": 7])]))
        // By the delivery-order rule the notification is already here.
        let arrived = await collector.next(for: result.subscription, timeout: .milliseconds(1))
        XCTAssertEqual(arrived?.transaction, save.transaction)
        let snapshot = try await client.call(ResultsSnapshot.self, .init(subscription: result.subscription))
        XCTAssertEqual(snapshot.seq, 1)
        let ordered = try await client.call(
            StoreFetch.self, FetchRequest(entity: "Team", sort: Self.byZone.sort, resultType: .ids))
        XCTAssertEqual(snapshot.ids, ordered.ids)
    }

    func testSubscribeValidation() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        let noSort = await assertServerError(.invalidParams) {
            try await client.call(ResultsSubscribe.self, .init(request: FetchRequest(entity: "Team")))
        }
        XCTAssertEqual(noSort?.data?["field"], "params.request.sort")
        let badSection = await assertServerError(.invalidParams) {
            try await client.call(ResultsSubscribe.self, .init(request: Self.byZone, sectionKeyPath: "teamName"))
        }
        XCTAssertEqual(badSection?.data?["field"], "params.sectionKeyPath")
        await assertServerError(.notFound) {
            try await client.call(ResultsObjects.self, .init(subscription: "s999", offset: 0, length: 1))
        }
    }

    func testSharedSetsAndVanishedClientsAreFreed() async throws {
        let daemon = try Daemon()
        let first = try await daemon.connect()
        let second = try await daemon.connect()
        let ids = try await first.loadWorldCup()
        let firstCollector = ChangeCollector(first)
        let secondCollector = ChangeCollector(second)
        var a = try await subscribe(first, Self.byZone, section: "qualifyingZone")
        var b = try await subscribe(second, Self.byZone, section: "qualifyingZone")
        for round in 1...3 {
            _ = try await second.call(
                StoreSave.self, .init(updated: [UpdatedObject(id: ids["Spain"]!, values: ["wins": .int(Int64(round))])])
            )
            a.apply(try await firstCollector.expect(for: a.subscription))
            b.apply(try await secondCollector.expect(for: b.subscription))
        }
        XCTAssertEqual(a.seq, 3)
        XCTAssertEqual(b.seq, 3, "each subscription keeps its own seq over the shared set")
        try await a.assertMatchesFreshFetch(first)
        try await b.assertMatchesFreshFetch(second)
    }

    /// Random transactions from two connections and the CLI process, over several subscriptions.
    func testRandomTransactionsKeepEveryMirrorEqualToAFreshFetch() async throws {
        let daemon = try Daemon()
        let watcher = try await daemon.connect(name: "watcher")
        let writer = try await daemon.connect(name: "writer")
        var ids = Array(try await writer.loadWorldCup().values)
        let collector = ChangeCollector(watcher)
        let requests: [(FetchRequest, String?)] = [
            (Self.byZone, "qualifyingZone"),
            (
                FetchRequest(
                    entity: "Team",
                    sort: [SortDescriptor(key: "wins"), SortDescriptor(key: "teamName", ascending: false)]), "wins"
            ),
            (
                FetchRequest(
                    entity: "Team", sort: [SortDescriptor(key: "teamName")], properties: ["teamName", "wins"]), nil
            ),
            (FetchRequest(entity: "Team", sort: [SortDescriptor(key: "imageName", ascending: false)]), nil),
        ]
        var mirrors: [ResultsMirror] = []
        for (request, section) in requests { mirrors.append(try await subscribe(watcher, request, section: section)) }
        var generator = SeededGenerator(seed: 42)
        var counter = 0
        for step in 0..<120 {
            let params = Self.randomTeamSave(ids: ids, counter: &counter, using: &generator)
            let result: StoreSave.Result
            if step % 30 == 29 {
                result = try daemon.saveFromAnotherProcess(params)
            } else {
                result = try await writer.call(StoreSave.self, params)
            }
            let deleted = Set(params.deleted.map(\.id))
            ids = Array(Set(ids).union(result.versions.keys).subtracting(deleted))
            for index in mirrors.indices {
                // A transaction that changed these results owes exactly one notification;
                // one that did not owes none (the next one's seq would show it).
                if try await mirrors[index].matchesFreshFetch(watcher) { continue }
                let change = try await collector.expect(for: mirrors[index].subscription)
                XCTAssertEqual(change.transaction, result.transaction)
                mirrors[index].apply(change)
                try await mirrors[index].assertMatchesFreshFetch(watcher)
            }
        }
        XCTAssertGreaterThan(mirrors[0].seq, 50)
    }

    static let zones = ["Africa", "Asia", "Europe", "North America", "South America", "Oceania", "Antarctica"]

    /// One random save of 1 to 4 changes to teams among `ids` (inserts, deletes, zone, wins and image changes).
    static func randomTeamSave(ids: [String], counter: inout Int, using generator: inout SeededGenerator)
        -> StoreSave.Parameters
    {
        var ids = ids
        var params = StoreSave.Parameters()
        for _ in 0..<Int.random(in: 1...4, using: &generator) {
            counter += 1
            switch Int.random(in: 0..<10, using: &generator) {
            case 0, 1:
                params.inserted.append(
                    InsertedObject(
                        entity: "Team",
                        values: [
                            "teamName": .string("Team \(counter)"),
                            "qualifyingZone": .string(zones.randomElement(using: &generator)!),
                            "wins": .int(Int64.random(in: 0...5, using: &generator)),
                        ]))
            case 2 where ids.count > 10:
                let id = ids.remove(at: Int.random(in: 0..<ids.count, using: &generator))
                params.deleted.append(DeletedObject(id: id))
            case 3, 4:
                params.updated.append(
                    UpdatedObject(
                        id: ids.randomElement(using: &generator)!,
                        values: ["qualifyingZone": .string(zones.randomElement(using: &generator)!)]))
            case 5:
                params.updated.append(
                    UpdatedObject(
                        id: ids.randomElement(using: &generator)!,
                        values: ["imageName": Bool.random(using: &generator) ? .null : .string("img\(counter % 5)")]
                    ))
            default:
                params.updated.append(
                    UpdatedObject(
                        id: ids.randomElement(using: &generator)!,
                        values: ["wins": .int(Int64.random(in: 0...5, using: &generator))]))
            }
        }
        // One id may appear twice in a save; keep the first of each.
        var seen = Set<String>(params.deleted.map(\.id))
        params.updated = params.updated.filter { seen.insert($0.id).inserted }
        return params
    }
}
