import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Batch operations, progress, cancellation, partial results and history, against a real daemon.
final class BatchTests: XCTestCase {
    static func items(_ range: Range<Int>) -> [[String: JSONValue]] {
        range.map { index in
            [
                "name": .string("item \(index)"),
                "createdAt": .string(ISO8601.string(from: 1_700_000_000 + Double(index))),
                "done": .bool(index % 2 == 0),
            ]
        }
    }

    /// Whether `note` is the `end` of the work-done progress `token`.
    static func isEnd(_ note: ServerNotification, token: String) -> Bool {
        note.method == ProgressNotification.name && note.params["token"]?.stringValue == token
            && note.params["value"]?["kind"] == "end"
    }

    /// Collects `$/progress` values for one token.
    func progressValues(_ collector: ChangeCollector, token: String) async -> [JSONValue] {
        await collector.drain(through: { Self.isEnd($0, token: token) }).compactMap { note -> JSONValue? in
            guard note.method == ProgressNotification.name, note.params["token"]?.stringValue == token else {
                return nil
            }
            return note.params["value"]
        }
    }

    func testBatchInsertWithProgressAndAnObserver() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        let observer = try await daemon.connect(name: "observer")
        try await client.loadWorldCup()
        let observed = ChangeCollector(observer)
        _ = try await observer.call(StoreObserve.self, .init(entities: ["Item"]))
        let collector = ChangeCollector(client)
        let count = 200_000
        let started = ContinuousClock.now
        let result = try await client.call(
            BatchInsert.self, .init(entity: "Item", objects: Self.items(0..<count), workDoneToken: "insert"),
            timeout: .seconds(300))
        print("batchInsert of \(count) Items (debug build): \(ContinuousClock.now - started)")
        XCTAssertEqual(result.inserted, count)
        let values = await progressValues(collector, token: "insert")
        XCTAssertEqual(values.first?["kind"], "begin")
        XCTAssertEqual(values.first?["total"], .int(Int64(count)))
        XCTAssertEqual(values.last?["kind"], "end")
        XCTAssertEqual(values.last?["completed"], .int(Int64(count)))
        XCTAssertEqual(values.last?["cancelled"], false)
        let completed = values.compactMap { $0["completed"]?.intValue }
        XCTAssertEqual(completed, completed.sorted(), "progress never goes back")
        XCTAssertGreaterThan(values.count, 2)
        let saved = await observed.take { $0.method == DidSave.name }?.decode(DidSave.self)
        XCTAssertEqual(saved?.transaction, result.transaction)
        XCTAssertEqual(saved?.changes["Item"]?.inserted.count, count)
        let stored = try await client.call(StoreCount.self, FetchRequest(entity: "Item"))
        XCTAssertEqual(stored.count, count)
    }

    func testUpsertByUniquenessConstraint() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(
            ModelDefine.self,
            .init(entities: [
                EntityDescription(
                    name: "Package",
                    attributes: [
                        AttributeDescription(name: "name", type: .string),
                        AttributeDescription(name: "release", type: .string),
                        AttributeDescription(name: "downloads", type: .integer, defaultValue: 0),
                        AttributeDescription(name: "summary", type: .string, optional: true),
                    ],
                    uniquenessConstraints: [["name", "release"]])
            ]))
        let page = try JSONParser.parse(try Fixtures.bytes("specs/page-1.json"))
        let objects = (page["result"]?.arrayValue ?? []).map { row -> [String: JSONValue] in
            [
                "name": row["name"]!, "release": row["version"]!, "downloads": row["downloads_a_month"]!,
                "summary": row["summary"] ?? .null,
            ]
        }
        let first = try await client.call(
            BatchInsert.self, .init(entity: "Package", objects: objects, onConflict: .update))
        XCTAssertEqual(first.inserted, objects.count)
        var changed = objects
        changed[0]["downloads"] = 123_456_789
        changed[1]["summary"] = "changed"
        let second = try await client.call(
            BatchInsert.self, .init(entity: "Package", objects: changed, onConflict: .update))
        XCTAssertEqual(second.inserted, 0)
        XCTAssertEqual(second.updated, 2)
        XCTAssertEqual(second.ignored, objects.count - 2)
        let total = try await client.call(StoreCount.self, FetchRequest(entity: "Package"))
        XCTAssertEqual(total.count, objects.count, "no duplicates")
        let ignored = try await client.call(
            BatchInsert.self, .init(entity: "Package", objects: Array(objects.prefix(3)), onConflict: .ignore))
        XCTAssertEqual(ignored.ignored, 3)
        XCTAssertEqual(ignored.transaction, 0, "nothing changed, nothing committed")
        let collision = await assertServerError(.uniqueConstraint) {
            try await client.call(
                BatchInsert.self, .init(entity: "Package", objects: [["name": "new", "release": "1"], objects[0]]))
        }
        XCTAssertNotNil(collision?.data?["objects"])
        let invalid = await assertServerError(.validationFailed) {
            try await client.call(
                BatchInsert.self,
                .init(
                    entity: "Package",
                    objects: [
                        ["name": 1, "release": "1"], ["release": "2"], ["name": "x", "release": "3", "color": "red"],
                    ]))
        }
        XCTAssertEqual(invalid?.data?["errors"]?.arrayValue?.count, 3)
        let after = try await client.call(StoreCount.self, FetchRequest(entity: "Package"))
        XCTAssertEqual(after.count, objects.count, "a failed batch writes nothing")
    }

    func testAsyncFetchWithProgressPartialResultsAndCancel() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        _ = try await client.call(BatchInsert.self, .init(entity: "Item", objects: Self.items(0..<30_000)))
        let collector = ChangeCollector(client)
        var request = FetchRequest(
            entity: "Item", sort: [SortDescriptor(key: "createdAt", ascending: false)], batchSize: 1000,
            workDoneToken: "fetch", partialResultToken: "chunks", countFirst: true)
        let result = try await client.call(StoreFetch.self, request)
        XCTAssertEqual(result.count, 30_000)
        XCTAssertEqual(result.objects, [])
        let notes = await collector.drain(through: { Self.isEnd($0, token: "fetch") })
        let chunks = notes.filter { $0.method == ProgressNotification.name && $0.params["token"] == "chunks" }
            .compactMap { $0.params["value"]?["objects"]?.arrayValue }
        let streamed = chunks.flatMap { $0 }
        request.partialResultToken = nil
        request.workDoneToken = nil
        let whole = try await client.call(StoreFetch.self, request)
        XCTAssertEqual(streamed, whole.objects, "chunks concatenate to the full sorted result")
        XCTAssertEqual(chunks.count, 30)
        let progress = notes.filter { $0.method == ProgressNotification.name && $0.params["token"] == "fetch" }
            .compactMap { $0.params["value"] }
        XCTAssertEqual(progress.first?["kind"], "begin")
        XCTAssertEqual(progress.first?["total"], 30_000, "countFirst puts the total in begin")
        XCTAssertEqual(progress.last?["kind"], "end")

        // Cancel mid-fetch: -32800 and an end with cancelled: true. The cancel goes at the fetch's
        // `begin`, which comes before SQLite sorts the 30,000 rows by an unindexed key: the daemon
        // now streams the chunks faster than a cancel sent at the first one comes back. On a
        // loaded machine the fetch may still finish first: then it is tried again, a few times.
        var cancelled = false
        for attempt in 0..<5 where !cancelled {
            let id = client.makeRequestID()
            let token = "slow\(attempt)"
            var slow = FetchRequest(
                entity: "Item", sort: [SortDescriptor(key: "name")], batchSize: 1, workDoneToken: .string(token),
                partialResultToken: .string(token + "Chunks"))
            slow.countFirst = false
            let task = Task {
                try await client.call(id: id, method: StoreFetch.name, params: try JSONCoding.encode(slow))
            }
            _ = await collector.take { $0.params["token"] == .string(token) && $0.params["value"]?["kind"] == "begin" }
            client.cancel(id)
            var failure: DepotClientError?
            do {
                _ = try await task.value
            } catch let error as DepotClientError {
                failure = error
            }
            let end = await collector.take {
                $0.params["token"] == .string(token) && $0.params["value"]?["kind"] == "end"
            }
            if let failure { XCTAssertEqual(failure.rpcError?.code, .requestCancelled) }
            cancelled = failure != nil
            XCTAssertEqual(
                end?.params["value"]?["cancelled"], .bool(cancelled), "the end says whether it was cancelled")
        }
        XCTAssertTrue(cancelled, "five fetches of 30,000 one-object chunks all finished before their cancel")

        // A plain fetch too big to answer at once says how to get it.
        let capped = try Daemon(arguments: ["--max-fetch-objects", "1000"])
        let small = try await capped.connect()
        try await small.loadWorldCup()
        _ = try await small.call(BatchInsert.self, .init(entity: "Item", objects: Self.items(0..<2000)))
        let tooBig = await assertServerError(.invalidParams) {
            try await small.call(StoreFetch.self, FetchRequest(entity: "Item"))
        }
        XCTAssertTrue(tooBig?.message.contains("partialResultToken") == true)
    }

    func testCancelledBatchInsertCommitsNothingAndPingsStayFast() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        let pinger = try await daemon.connect(name: "pinger")
        try await client.loadWorldCup()
        let id = client.makeRequestID()
        let params = try JSONCoding.encode(
            BatchInsert.Parameters(entity: "Item", objects: Self.items(0..<150_000), workDoneToken: "big"))
        let collector = ChangeCollector(client)
        let insert = Task {
            try await client.call(id: id, method: BatchInsert.name, params: params, timeout: .seconds(300))
        }
        // Pings from another session answer while the daemon parses the 12 MB request
        // and while the insert runs on the writer.
        var worst: Duration = .zero
        for _ in 0..<50 {
            let start = ContinuousClock.now
            _ = try await pinger.call(Ping.self, Empty())
            worst = max(worst, ContinuousClock.now - start)
        }
        XCTAssertLessThan(worst, .seconds(1), "pings wait for no parse and no write")
        _ = await collector.take(timeout: .seconds(60)) { $0.params["value"]?["kind"] == "report" }
        client.cancel(id)
        do {
            _ = try await insert.value
            XCTFail("the insert should have been cancelled")
        } catch let error as DepotClientError {
            XCTAssertEqual(error.rpcError?.code, .requestCancelled)
        }
        let count = try await client.call(StoreCount.self, FetchRequest(entity: "Item"))
        XCTAssertEqual(count.count, 0, "a cancelled batch commits nothing")
    }

    func testKillDuringBatchInsertLeavesEarlierDataIntact() async throws {
        let first = try Daemon()
        let client = try await first.connect()
        try await client.loadWorldCup()
        _ = try await client.call(BatchInsert.self, .init(entity: "Item", objects: Self.items(0..<1000)))
        let collector = ChangeCollector(client)
        let params = try JSONCoding.encode(
            BatchInsert.Parameters(entity: "Item", objects: Self.items(1000..<100_000), workDoneToken: "doomed"))
        let doomed = Task { try? await client.call(method: BatchInsert.name, params: params, timeout: .seconds(300)) }
        _ = await collector.take(timeout: .seconds(60)) { $0.params["value"]?["kind"] == "report" }
        first.stop(signal: SIGKILL)
        client.abort()
        _ = await doomed.value
        let second = try Daemon(dataDirectory: first.dataDirectory)
        let again = try await second.connect()
        let items = try await again.call(StoreCount.self, FetchRequest(entity: "Item"))
        XCTAssertEqual(items.count, 1000, "the interrupted batch is wholly absent")
        let teams = try await again.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(teams.count, 32)
        second.stop()
        second.removeData()
    }

    func testBatchUpdateAndDeleteFollowRulesAndFeedSubscriptions() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        let collector = ChangeCollector(client)
        let subscribed = try await client.call(
            ResultsSubscribe.self,
            .init(request: FetchedResultsTests.byZone, sectionKeyPath: "qualifyingZone", include: .all))
        var mirror = ResultsMirror(subscribed, request: FetchedResultsTests.byZone, sectionKeyPath: "qualifyingZone")
        let updated = try await client.call(
            BatchUpdate.self,
            .init(
                entity: "Team", predicate: "qualifyingZone == $zone", arguments: ["zone": "Europe"],
                values: ["wins": 9], workDoneToken: "upd"))
        XCTAssertEqual(updated.count, 13)
        mirror.apply(try await collector.expect(for: mirror.subscription))
        try await mirror.assertMatchesFreshFetch(client)
        let deleted = try await client.call(BatchDelete.self, .init(entity: "Team", predicate: "wins == 9"))
        XCTAssertEqual(deleted.count, 13)
        mirror.apply(try await collector.expect(for: mirror.subscription))
        try await mirror.assertMatchesFreshFetch(client)
        XCTAssertFalse(mirror.sections.map(\.name).contains("Europe"), "the emptied section is gone")
        await assertServerError(.predicateSyntax) {
            try await client.call(BatchDelete.self, .init(entity: "Team", predicate: "wins =="))
        }

        // deny refuses and deletes nothing.
        _ = try await client.call(
            ModelDefine.self,
            .init(
                entities: WorldCup.model + [
                    WorldCup.item,
                    EntityDescription(
                        name: "Owner", attributes: [AttributeDescription(name: "name", type: .string)],
                        relationships: [
                            RelationshipDescription(
                                name: "pets", destination: "Pet", toMany: true, inverse: "owner", deleteRule: .deny)
                        ]),
                    EntityDescription(
                        name: "Pet", attributes: [AttributeDescription(name: "name", type: .string)],
                        relationships: [RelationshipDescription(name: "owner", destination: "Owner", inverse: "pets")]),
                ]))
        _ = try await client.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Owner", tempId: "o", values: ["name": "Ann"]),
                InsertedObject(entity: "Owner", values: ["name": "Bob"]),
                InsertedObject(entity: "Pet", values: ["name": "Rex", "owner": "o"]),
            ]))
        await assertServerError(.deleteDenied) { try await client.call(BatchDelete.self, .init(entity: "Owner")) }
        let owners = try await client.call(StoreCount.self, FetchRequest(entity: "Owner"))
        XCTAssertEqual(owners.count, 2)
    }

    func testHistoryAfterAGapEqualsWhatDidSaveDelivered() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        let ids = try await client.loadWorldCup()
        let collector = ChangeCollector(client)
        _ = try await client.call(StoreObserve.self, .init())
        let before = try await client.call(StoreHistory.self, .init(since: 0)).latest
        _ = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: ids["Chile"]!, values: ["wins": 3])], author: "a"))
        _ = try await client.call(BatchInsert.self, .init(entity: "Item", objects: Self.items(0..<10), author: "b"))
        _ = try await client.call(
            BatchDelete.self, .init(entity: "Team", predicate: "teamName BEGINSWITH 'S'", author: "c"))
        let delivered = await collector.drain(through: { $0.decode(DidSave.self)?.author == "c" })
            .compactMap { $0.decode(DidSave.self) }
        let history = try await client.call(StoreHistory.self, .init(since: before))
        XCTAssertEqual(history.transactions.map(\.transaction), delivered.map(\.transaction))
        XCTAssertEqual(history.transactions.map(\.changes), delivered.map(\.changes))
        XCTAssertEqual(history.transactions.map(\.author), ["a", "b", "c"])
    }

    func testHistoryRetention() async throws {
        let daemon = try Daemon(arguments: ["--history-retention", "10"])
        let client = try await daemon.connect()
        let ids = try await client.loadWorldCup()
        for round in 0..<140 {
            _ = try await client.call(
                StoreSave.self,
                .init(updated: [UpdatedObject(id: ids["Chile"]!, values: ["wins": .int(Int64(round + 100))])]))
        }
        let history = try await client.call(StoreHistory.self, .init(since: 0, limit: 1000))
        XCTAssertEqual(history.latest, 141)
        XCTAssertGreaterThan(history.oldest, 100, "older transactions were pruned")
        XCTAssertLessThanOrEqual(history.transactions.count, 10 + 64)
        let refused = try ProcessOutcome.run(
            Executables.depotd, ["--data-dir", daemon.dataDirectory.path + "-x", "--history-retention", "soon"])
        XCTAssertNotEqual(refused.status, 0)
    }
}
