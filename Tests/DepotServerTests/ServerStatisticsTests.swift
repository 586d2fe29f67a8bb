import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotServer

/// The figures of `server/stats`, computed in memory (no client, no socket traffic).
final class ServerStatisticsTests: XCTestCase {
    // MARK: The histogram

    func testHistogramBucketsAreContiguousAndTight() {
        var previousUpper: UInt64?
        for bucket in 0..<LatencyHistogram.bucketCount {
            let upper = LatencyHistogram.upperBound(of: bucket)
            if let previousUpper { XCTAssertGreaterThan(upper, previousUpper, "bucket \(bucket)") }
            XCTAssertEqual(LatencyHistogram.bucket(of: upper), bucket, "the upper bound of \(bucket) falls in it")
            if bucket > 0 {
                XCTAssertEqual(
                    LatencyHistogram.bucket(of: previousUpper! + 1), bucket,
                    "bucket \(bucket) starts after \(bucket - 1)")
            }
            previousUpper = upper
        }
        for value: UInt64 in [0, 1, 63, 64, 65, 1000, 123_456_789, UInt64(1) << 40, UInt64.max] {
            let upper = LatencyHistogram.upperBound(of: LatencyHistogram.bucket(of: value))
            XCTAssertGreaterThanOrEqual(upper, value)
            XCTAssertLessThanOrEqual(Double(upper - value), Double(value) / 32 + 1, "relative error of \(value)")
        }
    }

    func testPercentilesOfKnownSamples() {
        var histogram = LatencyHistogram()
        XCTAssertEqual(histogram.percentiles.count, 0)
        XCTAssertEqual(histogram.percentiles.p99Ms, 0)
        // 1 ms … 1000 ms, shuffled: the q-quantile is q·1000 ms.
        for milliseconds in (1...1000).shuffled() { histogram.record(.milliseconds(milliseconds)) }
        let figures = histogram.percentiles
        XCTAssertEqual(figures.count, 1000)
        XCTAssertEqual(figures.maxMs, 1000)
        XCTAssertEqual(figures.meanMs, 500.5, accuracy: 0.001)
        for (value, expected) in [(figures.p50Ms, 500.0), (figures.p90Ms, 900.0), (figures.p99Ms, 990.0)] {
            XCTAssertGreaterThanOrEqual(value, expected)
            XCTAssertLessThanOrEqual(value, expected * (1 + 1.0 / 32))
        }
    }

    func testOneSlowSampleShowsInTheTailOnly() {
        var histogram = LatencyHistogram()
        for _ in 0..<99 { histogram.record(.microseconds(100)) }
        histogram.record(.seconds(2))
        XCTAssertLessThan(histogram.percentiles.p50Ms, 0.11)
        XCTAssertLessThan(histogram.percentiles.p99Ms, 0.11)
        XCTAssertEqual(histogram.percentiles.maxMs, 2000)
        XCTAssertEqual(histogram.value(atQuantile: 1), 2_000_000_000)
    }

    // MARK: Counters

    func testWriterQueueAndCommitLatency() {
        let stats = ServerStatistics()
        stats.writeQueued()
        stats.writeQueued()
        XCTAssertEqual(stats.writerQueueDepth, 2)
        // A write that fails commits nothing: no commit latency.
        stats.measureWrite { false }
        XCTAssertEqual(stats.writerQueueDepth, 1)
        XCTAssertEqual(stats.commitCount, 0)
        XCTAssertEqual(stats.latency.commit.count, 0)
        // A write that commits after 10 ms; its deltas (published in the lane) took 40 ms.
        stats.measureWrite {
            Thread.sleep(forTimeInterval: 0.01)
            return true
        }
        stats.recordDelta(.milliseconds(40))
        XCTAssertEqual(stats.writerQueueDepth, 0)
        XCTAssertEqual(stats.commitCount, 1)
        let latency = stats.latency
        XCTAssertEqual(latency.commit.count, 1)
        XCTAssertGreaterThanOrEqual(latency.commit.maxMs, 9)
        XCTAssertLessThan(latency.commit.maxMs, 40, "publishing is not commit latency")
        XCTAssertEqual(latency.delta.count, 1)
        XCTAssertEqual(latency.delta.maxMs, 40, accuracy: 0.01)
    }

    func testNotificationCountsByMethodAndSubscription() {
        let stats = ServerStatistics()
        stats.notificationSent("results/didChange", subscription: "s1")
        stats.notificationSent("results/didChange", subscription: "s1")
        stats.notificationSent("results/didChange", subscription: "s2")
        stats.notificationSent("store/didSave")
        XCTAssertEqual(stats.notificationsByMethod, ["results/didChange": 3, "store/didSave": 1])
        XCTAssertEqual(stats.notificationsSent(to: "s1"), 2)
        XCTAssertEqual(stats.notificationsSent(to: "s3"), 0)
        stats.forgetSubscriptions(except: ["s2"])
        XCTAssertEqual(stats.countedSubscriptions, 1)
        XCTAssertEqual(stats.notificationsSent(to: "s1"), 0)
        XCTAssertEqual(stats.notificationsSent(to: "s2"), 1)
    }

    // MARK: A server's figures

    func testServerFiguresFollowSessionsSubscriptionsAndCommits() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-stats-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let server = try DepotService(
            configuration: ServerConfiguration(dataDirectory: directory),
            store: Store(path: directory.appendingPathComponent("depot.sqlite").path), outbox: RecordingOutbox())
        defer { server.stop() }
        _ = try server.store.defineModel([
            EntityDescription(
                name: "Team",
                attributes: [
                    AttributeDescription(name: "name", type: .string),
                    AttributeDescription(name: "zone", type: .string),
                ])
        ])
        let empty = try server.statistics()
        XCTAssertEqual(empty.sessions, [])
        XCTAssertEqual(empty.subscriptions, [])
        XCTAssertEqual(empty.store.transaction, 0)
        XCTAssertNil(empty.store.lastTransaction)
        XCTAssertGreaterThan(empty.store.sizeBytes, 0)

        let alice: [UInt8] = [1]
        let bob: [UInt8] = [2]
        _ = server.sessions.open(routingID: alice, clientInfo: ImplementationInfo(name: "alice", version: "1"))
        _ = server.sessions.open(routingID: bob, clientInfo: ImplementationInfo(name: "bob", version: "2"))
        let subscribe = try JSONCoding.decode(
            ResultsSubscribe.Parameters.self,
            from: JSONParser.parse(
                Array(
                    #"{"request": {"entity": "Team", "sort": [{"key": "zone"}, {"key": "name"}], "batchSize": 5}, "sectionKeyPath": "zone"}"#
                        .utf8)))
        for peer in [alice, bob, alice] {
            let answered = DispatchSemaphore(value: 0)
            let view = StoreView.unrestricted(server.store)
            try server.results.subscribe(
                subscribe, definition: try view.resultsDefinition(subscribe),
                context: RequestContext(
                    service: server, routingID: peer, requestID: nil, cancellation: Cancellation(), view: view),
                reply: Reply { _ in answered.signal() })
            answered.wait()
        }
        let save = try JSONCoding.decode(
            StoreSave.Parameters.self,
            from: JSONParser.parse(
                Array(
                    #"{"author": "seed", "inserted": [{"entity": "Team", "values": {"name": "Brazil", "zone": "South America"}}, {"entity": "Team", "values": {"name": "France", "zone": "Europe"}}]}"#
                        .utf8)))
        server.stats.writeQueued()
        server.stats.measureWrite {
            let (_, transaction) = try! server.store.save(save, writeScope: .unrestricted)
            let published = DispatchSemaphore(value: 0)
            server.writes.afterCommits {
                server.publish(transaction!, store: $0)
                published.signal()
            }
            published.wait()
            return true
        }

        let figures = try server.statistics()
        XCTAssertEqual(figures.server.name, "depotd")
        XCTAssertEqual(figures.sessions.map { $0.client?.name }, ["alice", "bob"])
        XCTAssertEqual(figures.sessions.map(\.subscriptions), [2, 1])
        XCTAssertEqual(figures.sessions.map(\.outboundBacklog), [0, 0])
        XCTAssertEqual(figures.subscriptions.count, 1, "identical requests share one result set")
        let shared = try XCTUnwrap(figures.subscriptions.first)
        XCTAssertEqual(shared.subscriptionIds, ["s1", "s2", "s3"])
        XCTAssertEqual(shared.sessions, 2)
        XCTAssertEqual(shared.rows, 2)
        XCTAssertEqual(shared.sections, 2)
        XCTAssertEqual(shared.sectionKeyPath, "zone")
        XCTAssertEqual(shared.request["entity"], "Team")
        XCTAssertNil(shared.request["batchSize"], "the batch size does not change the results")
        XCTAssertEqual(shared.notificationsSent, 3, "one results/didChange per subscription")
        XCTAssertEqual(figures.notificationsSent["results/didChange"], 3)
        XCTAssertEqual(figures.writer, ServerStats.Writer(queueDepth: 0, commits: 1))
        XCTAssertEqual(figures.latency.commit.count, 1)
        XCTAssertEqual(figures.latency.delta.count, 1)
        XCTAssertGreaterThan(figures.latency.delta.maxMs, 0)
        XCTAssertEqual(figures.store.transaction, 1)
        let last = try XCTUnwrap(figures.store.lastTransaction)
        XCTAssertEqual(last.transaction, 1)
        XCTAssertEqual(last.author, "seed")
        XCTAssertEqual(last.counts, ["Team": ServerStats.ChangeCounts(inserted: 2, updated: 0, deleted: 0)])

        server.closeSession(alice, reason: "test")
        let after = try server.statistics()
        XCTAssertEqual(after.sessions.map { $0.client?.name }, ["bob"])
        XCTAssertEqual(after.subscriptions.first?.subscriptionIds, ["s2"])
        XCTAssertEqual(after.subscriptions.first?.notificationsSent, 1)
    }

    func testSessionsArePagedAt10000() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-stats-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var configuration = ServerConfiguration(dataDirectory: directory)
        configuration.maxSessions = 20_000
        let server = try DepotService(
            configuration: configuration,
            store: Store(path: directory.appendingPathComponent("depot.sqlite").path), outbox: RecordingOutbox())
        defer { server.stop() }
        for index in 0..<10_000 {
            let routingID = withUnsafeBytes(of: UInt32(index).bigEndian, Array.init)
            _ = server.sessions.open(
                routingID: routingID, clientInfo: ImplementationInfo(name: "load\(index % 7)", version: "1"))
        }
        let started = ContinuousClock.now
        let first = try server.statistics()
        let elapsed = ContinuousClock.now - started
        XCTAssertEqual(first.server.sessionCount, 10_000, "the count covers every session")
        XCTAssertEqual(first.sessions.count, ServerStats.Parameters.defaultSessionLimit, "one page by default")
        XCTAssertLessThan(elapsed, .seconds(1), "bounded (a debug build on a busy machine)")
        var seen = first.sessions.map(\.id)
        var cursor = first.nextSessionsAfter
        while let after = cursor {
            let page = try server.statistics(.init(sessionLimit: 3000, sessionsAfter: after))
            seen += page.sessions.map(\.id)
            cursor = page.nextSessionsAfter
        }
        XCTAssertEqual(seen.count, 10_000)
        XCTAssertEqual(Set(seen).count, 10_000, "every session once, across the pages")
        XCTAssertThrowsError(try server.statistics(.init(sessionLimit: 10_001))) { error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.sessionLimit")
        }
        XCTAssertThrowsError(try server.statistics(.init(sessionsAfter: "nonsense")))
    }
}
