import DepotProtocol
import Prometheus

/// `server/stats` in the Prometheus text exposition format, written by
/// swift-prometheus (served by the studio at `/metrics`, printed by
/// `depot stats --prometheus`).
public enum PrometheusExposition {
    /// The metrics of one `server/stats` answer.
    public static func text(_ stats: ServerStats.Result) -> String {
        let registry = PrometheusCollectorRegistry()
        func gauge(_ name: String, _ help: String, _ value: Double, _ labels: [(String, String)] = []) {
            registry.makeGauge(name: name, labels: labels, help: help).set(value)
        }
        func counter(_ name: String, _ help: String, _ value: Int64, _ labels: [(String, String)] = []) {
            registry.makeCounter(name: name, labels: labels, help: help).increment(by: value)
        }
        gauge("depot_up", "1 when depotd answered server/stats.", 1, [("version", stats.server.version)])
        gauge("depot_uptime_seconds", "Seconds since depotd started serving.", stats.server.uptimeSeconds)
        gauge("depot_sessions", "Open client sessions.", Double(stats.sessions.count))
        for session in stats.sessions {
            gauge(
                "depot_session_outbound_backlog", "Messages waiting for a session beyond ZeroMQ's own queue.",
                Double(session.outboundBacklog), [("session", session.id), ("client", session.client?.name ?? "")])
        }
        gauge(
            "depot_subscriptions", "Live fetched-results subscriptions.",
            Double(stats.subscriptions.reduce(0) { $0 + $1.subscriptionIds.count }))
        gauge(
            "depot_result_sets", "Maintained result sets (identical requests share one).",
            Double(stats.subscriptions.count))
        for set in stats.subscriptions {
            let labels = [
                ("set", set.subscriptionIds.first ?? ""), ("entity", set.request["entity"]?.stringValue ?? ""),
            ]
            gauge("depot_result_set_rows", "Objects in a maintained result set.", Double(set.rows), labels)
            gauge(
                "depot_result_set_sessions", "Sessions sharing a maintained result set.", Double(set.sessions), labels)
        }
        for (method, count) in stats.notificationsSent.sorted(by: { $0.key < $1.key }) {
            counter(
                "depot_notifications_sent_total", "Notifications queued for clients, by method.", count,
                [("method", method)])
        }
        gauge(
            "depot_writer_queue_depth", "Write requests queued or running on the single writer.",
            Double(stats.writer.queueDepth))
        counter("depot_commits_total", "Write requests that committed a transaction.", stats.writer.commits)
        for (name, figures, help) in [
            ("commit", stats.latency.commit, "Commit latency on the writer (validation, SQL, SQLite commit), seconds."),
            (
                "delta", stats.latency.delta,
                "Time to turn one transaction into every subscription's results/didChange, seconds."
            ),
        ] {
            for (quantile, milliseconds) in [
                ("0.5", figures.p50Ms), ("0.9", figures.p90Ms), ("0.99", figures.p99Ms), ("1", figures.maxMs),
            ] {
                gauge("depot_\(name)_latency_seconds", help, milliseconds / 1000, [("quantile", quantile)])
            }
            counter(
                "depot_\(name)_latency_samples_total", "Samples behind depot_\(name)_latency_seconds.", figures.count)
        }
        gauge("depot_store_size_bytes", "Size of the SQLite database file.", Double(stats.store.sizeBytes))
        gauge("depot_store_wal_bytes", "Size of the SQLite write-ahead log.", Double(stats.store.walBytes))
        gauge("depot_store_transaction", "Number of the newest committed transaction.", Double(stats.store.transaction))
        return registry.emitToString()
    }
}
