import DepotProtocol
import XCTest

@testable import DepotStudio

final class PrometheusExpositionTests: XCTestCase {
    func testEveryFigureIsExposedWithTypeAndLabels() throws {
        let percentiles = ServerStats.Percentiles(count: 7, meanMs: 2, p50Ms: 1.5, p90Ms: 3, p99Ms: 4, maxMs: 5)
        let stats = ServerStats.Result(
            server: .init(name: "depotd", version: "0.1.0", uptimeSeconds: 12.5, endpoints: ["ipc://x"]),
            sessions: [
                .init(
                    id: "a1", client: ImplementationInfo(name: "studio", version: "1"), key: nil, subscriptions: 1,
                    observers: 0, inFlight: 0, outboundBacklog: 3, idleSeconds: 0.5)
            ],
            subscriptions: [
                .init(
                    request: ["entity": "Team"], sectionKeyPath: nil, cacheName: nil, rows: 32, sections: 1,
                    transaction: 9, subscriptionIds: ["s1", "s4"], sessions: 2, notificationsSent: 6)
            ],
            notificationsSent: ["results/didChange": 6, "store/didSave": 2],
            writer: .init(queueDepth: 1, commits: 9), latency: .init(commit: percentiles, delta: percentiles),
            store: .init(path: "/d/depot.sqlite", sizeBytes: 4096, walBytes: 0, transaction: 9, lastTransaction: nil))
        let text = PrometheusExposition.text(stats)
        let lines = Set(text.split(separator: "\n").map(String.init))
        for expected in [
            "# TYPE depot_sessions gauge", "depot_sessions 1.0", "depot_subscriptions 2.0", "depot_result_sets 1.0",
            #"depot_session_outbound_backlog{session="a1",client="studio"} 3.0"#,
            #"depot_result_set_rows{set="s1",entity="Team"} 32.0"#,
            "# TYPE depot_notifications_sent_total counter",
            #"depot_notifications_sent_total{method="results/didChange"} 6"#, "depot_commits_total 9",
            "depot_writer_queue_depth 1.0", #"depot_commit_latency_seconds{quantile="0.5"} 0.0015"#,
            #"depot_delta_latency_seconds{quantile="0.99"} 0.004"#, "depot_store_size_bytes 4096.0",
            "depot_store_transaction 9.0",
        ] {
            XCTAssertTrue(lines.contains(expected), "missing \(expected) in:\n\(text)")
        }
    }
}
