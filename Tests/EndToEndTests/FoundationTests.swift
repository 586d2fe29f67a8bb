import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// The foundation issue's scenarios against a real daemon over TCP loopback.
final class FoundationTests: XCTestCase {
    func testDefineSaveFetchAcrossProcesses() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        XCTAssertEqual(client.serverInfo.serverInfo.name, "depotd")
        XCTAssertEqual(client.serverInfo.protocolVersion, "1")
        let ids = try await client.loadWorldCup()
        XCTAssertEqual(ids.count, 32)

        let model = try await client.call(ModelGet.self, Empty())
        XCTAssertEqual(Set(model.entities.map(\.name)), ["Team", "Item"])

        let sorted = try await client.call(
            StoreFetch.self, FetchRequest(entity: "Team", sort: [SortDescriptor(key: "teamName")], limit: 3))
        XCTAssertEqual(
            sorted.objects?.compactMap { $0["teamName"]?.stringValue }, ["Algeria", "Argentina", "Australia"])
        let count = try await client.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(count.count, 32)
        let idsOnly = try await client.call(
            StoreFetch.self,
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "teamName", ascending: false)], limit: 1, resultType: .ids))
        XCTAssertEqual(idsOnly.ids, [ids["Uruguay"]!])
        let got = try await client.call(StoreGet.self, .init(ids: [ids["Brazil"]!, "Team/9999"]))
        XCTAssertEqual(got.objects[0]["teamName"], "Brazil")
        XCTAssertEqual(got.objects[1], .null)
        await client.close()
        XCTAssertEqual(daemon.stop(), 0, "SIGTERM must stop depotd with status 0")
    }

    func testObserverSeesOtherProcessSaveBeforeTheSaverGetsItsResponse() async throws {
        let daemon = try Daemon()
        let observer = try await daemon.connect(name: "observer")
        let saver = try await daemon.connect(name: "saver")
        let ids = try await saver.loadWorldCup()
        let observed = try await observer.call(StoreObserve.self, .init(entities: ["Team"], includeValues: true))
        let ownObserver = try await saver.call(StoreObserve.self, .init())
        let observerNotes = observer.notifications()
        let saverEvents = saver.notifications()

        let brazil = ids["Brazil"]!
        let result = try await saver.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: brazil, values: ["wins": 6])], author: "saver"))

        // The saver's own didSave arrived before its response: it is already in the stream.
        var saverIterator = saverEvents.makeAsyncIterator()
        let own = await saverIterator.next()?.decode(DidSave.self)
        XCTAssertEqual(own?.observer, ownObserver.observer)
        XCTAssertEqual(own?.transaction, result.transaction)

        var iterator = observerNotes.makeAsyncIterator()
        let note = await iterator.next()?.decode(DidSave.self)
        XCTAssertEqual(note?.observer, observed.observer)
        XCTAssertEqual(note?.transaction, result.transaction)
        XCTAssertEqual(note?.author, "saver")
        XCTAssertEqual(note?.changes["Team"]?.updated, [EntityChanges.Update(id: brazil, keys: ["wins"])])
        XCTAssertEqual(note?.objects?[brazil]?["wins"], 6)
    }

    /// Two processes: this one observes, the `depot` CLI saves.
    func testObserverSeesAnotherProcessSave() async throws {
        let daemon = try Daemon()
        let observer = try await daemon.connect(name: "observer")
        try await observer.loadWorldCup()
        let notes = ChangeCollector(observer)
        let registration = try await observer.call(StoreObserve.self, .init())
        let cli = try ProcessOutcome.run(
            Executables.depot,
            [
                "call", "--connect", daemon.endpoint, "store/save",
                #"{"inserted":[{"entity":"Team","tempId":"n","values":{"teamName":"Narnia","qualifyingZone":"Fiction"}}],"author":"cli"}"#,
            ])
        XCTAssertEqual(cli.status, 0, cli.errors)
        let printed = try JSONParser.parse(Array(cli.output.utf8))
        let note = await notes.take { $0.method == DidSave.name }?.decode(DidSave.self)
        XCTAssertEqual(note?.observer, registration.observer)
        XCTAssertEqual(note?.author, "cli")
        XCTAssertEqual(note?.changes["Team"]?.inserted, [printed["ids"]?["n"]?.stringValue ?? "?"])
    }

    func testAtomicSaveLeavesNothingOnConstraintViolation() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        let error = await assertServerError(.uniqueConstraint) {
            try await client.call(
                StoreSave.self,
                .init(inserted: [
                    InsertedObject(entity: "Team", values: ["teamName": "Atlantis", "qualifyingZone": "Ocean"]),
                    InsertedObject(entity: "Team", values: ["teamName": "Brazil", "qualifyingZone": "Ocean"]),
                ]))
        }
        XCTAssertEqual(error?.data?["entity"], "Team")
        let count = try await client.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(count.count, 32)
        let validation = await assertServerError(.validationFailed) {
            try await client.call(
                StoreSave.self,
                .init(inserted: [
                    InsertedObject(entity: "Team", values: ["teamName": 1, "qualifyingZone": "Ocean", "color": "red"])
                ]))
        }
        let problems = validation?.data?["errors"]?.arrayValue ?? []
        XCTAssertEqual(Set(problems.compactMap { $0["key"]?.stringValue }), ["teamName", "color"])
    }

    func testRestartKeepsDataAndModel() async throws {
        let first = try Daemon()
        let client = try await first.connect()
        try await client.loadWorldCup()
        client.abort()
        XCTAssertEqual(first.stop(), 0)
        let second = try Daemon(dataDirectory: first.dataDirectory)
        let again = try await second.connect()
        let count = try await again.call(StoreCount.self, FetchRequest(entity: "Team"))
        XCTAssertEqual(count.count, 32)
        let history = try await again.call(StoreHistory.self, .init(since: 0))
        XCTAssertEqual(history.latest, 1)
        second.stop()
        second.removeData()
    }

    func testNonLoopbackTCPIsRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-refuse-\(UUID().uuidString)")
        let outcome = try ProcessOutcome.run(
            Executables.depotd, ["--data-dir", directory.path, "--listen", "tcp://0.0.0.0:0"])
        XCTAssertNotEqual(outcome.status, 0)
        XCTAssertTrue(outcome.errors.contains("non-loopback"), outcome.errors)
    }

    func testDataDirectoryIsPrivate() throws {
        let daemon = try Daemon()
        let attributes = try FileManager.default.attributesOfItem(atPath: daemon.dataDirectory.path)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o700)
    }
}
