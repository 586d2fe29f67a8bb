import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// `server/stats` against a real daemon: what it reports follows what the clients do.
final class ServerStatsTests: XCTestCase {
    func testStatsFollowSessionsSubscriptionsAndSaves() async throws {
        let daemon = try Daemon()
        let watcher = try await daemon.connect(name: "watcher")
        let editor = try await daemon.connect(name: "editor")
        let ids = try await editor.loadWorldCup()
        let request = FetchRequest(
            entity: "Team", sort: [SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "teamName")])
        let first = try await watcher.call(
            ResultsSubscribe.self, .init(request: request, sectionKeyPath: "qualifyingZone"))
        let second = try await editor.call(
            ResultsSubscribe.self, .init(request: request, sectionKeyPath: "qualifyingZone"))
        _ = try await watcher.call(StoreObserve.self, .init())

        let before = try await watcher.call(ServerStats.self, .init())
        XCTAssertEqual(before.server.name, "depotd")
        XCTAssertEqual(before.server.endpoints, [daemon.endpoint])
        XCTAssertEqual(Set(before.sessions.compactMap { $0.client?.name }), ["watcher", "editor"])
        XCTAssertEqual(before.sessions.map(\.subscriptions), [1, 1])
        XCTAssertEqual(before.sessions.first { $0.client?.name == "watcher" }?.observers, 1)
        XCTAssertEqual(before.subscriptions.count, 1, "one shared set for the identical requests")
        let shared = try XCTUnwrap(before.subscriptions.first)
        XCTAssertEqual(Set(shared.subscriptionIds), [first.subscription, second.subscription])
        XCTAssertEqual(shared.sessions, 2)
        XCTAssertEqual(shared.rows, first.count)
        XCTAssertEqual(shared.sections, first.sections.count)
        XCTAssertEqual(shared.sectionKeyPath, "qualifyingZone")
        XCTAssertEqual(shared.request["entity"], "Team")
        XCTAssertEqual(shared.notificationsSent, 0)
        XCTAssertEqual(before.store.transaction, first.transaction)
        XCTAssertGreaterThan(before.store.sizeBytes, 0)
        XCTAssertTrue(before.store.path.hasSuffix("depot.sqlite"))
        XCTAssertEqual(before.writer.queueDepth, 0)
        let commitsBefore = before.writer.commits
        XCTAssertGreaterThanOrEqual(commitsBefore, 1, "the World Cup seed committed")

        let save = try await editor.call(
            StoreSave.self,
            .init(updated: [UpdatedObject(id: ids["Japan"]!, values: ["wins": 9])], author: "stats-test"))
        // The save's answer may overtake the writer's counters and the publishing: wait for them.
        var after = try await watcher.call(ServerStats.self, .init())
        let deadline = ContinuousClock.now + .seconds(5)
        while after.writer.commits <= commitsBefore || after.notificationsSent["results/didChange"] ?? 0 < 2,
            ContinuousClock.now < deadline
        {
            try await Task.sleep(for: .milliseconds(20))
            after = try await watcher.call(ServerStats.self, .init())
        }
        XCTAssertEqual(after.writer.commits, commitsBefore + 1)
        XCTAssertEqual(after.latency.commit.count, commitsBefore + 1)
        XCTAssertGreaterThan(after.latency.commit.p50Ms, 0)
        XCTAssertLessThanOrEqual(after.latency.commit.p50Ms, after.latency.commit.maxMs)
        XCTAssertEqual(after.latency.delta.count, 1, "one transaction while subscriptions were live")
        XCTAssertEqual(after.subscriptions.first?.notificationsSent, 2, "one results/didChange per subscription")
        XCTAssertEqual(after.notificationsSent["results/didChange"], 2)
        XCTAssertEqual(after.notificationsSent["store/didSave"], 1)
        XCTAssertEqual(after.store.transaction, save.transaction)
        let last = try XCTUnwrap(after.store.lastTransaction)
        XCTAssertEqual(last.transaction, save.transaction)
        XCTAssertEqual(last.author, "stats-test")
        XCTAssertEqual(last.counts["Team"], ServerStats.ChangeCounts(inserted: 0, updated: 1, deleted: 0))

        await editor.close()
        let alone = try await watcher.call(ServerStats.self, .init())
        XCTAssertEqual(alone.sessions.compactMap { $0.client?.name }, ["watcher"])
        XCTAssertEqual(alone.subscriptions.first?.subscriptionIds, [first.subscription])
        XCTAssertEqual(alone.subscriptions.first?.sessions, 1)
        await watcher.close()
        XCTAssertEqual(daemon.stop(), 0)
    }
}
