import ArgumentParser
import DepotClient
import DepotProtocol
import DepotStudio
import Foundation

/// `depot stats`: what the daemon is doing now (`server/stats`).
struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Show the daemon's sessions, subscriptions, writer queue, latencies and store size.",
        discussion: "--prometheus prints the Prometheus text format (what `depot studio` serves at /metrics).")

    @OptionGroup var connection: ConnectionOptions

    @Flag(help: "Print JSON (the server/stats result).")
    var json = false

    @Flag(help: "Print the Prometheus text exposition format.")
    var prometheus = false

    func validate() throws {
        if json && prometheus { throw ValidationError("--json and --prometheus exclude each other: pick one") }
    }

    func run() async throws {
        let client = try await connection.connect()
        defer { client.abort() }
        let stats: ServerStats.Result
        do {
            stats = try await client.call(ServerStats.self, .init())
        } catch {
            throw describe(error, calling: ServerStats.name)
        }
        if prometheus {
            print(PrometheusExposition.text(stats), terminator: "")
        } else if json {
            print(jsonLine((try? JSONCoding.encode(stats)) ?? .null))
        } else {
            print(StatsReport.text(stats))
        }
    }
}

/// `server/stats` as text for people.
enum StatsReport {
    static func text(_ stats: ServerStats.Result) -> String {
        var lines: [String] = []
        let server = stats.server
        lines.append(
            "\(server.name) \(server.version), up \(duration(server.uptimeSeconds)), on \(server.endpoints.joined(separator: ", "))"
        )
        let store = stats.store
        var storeLine =
            "store: \(store.path), \(bytes(store.sizeBytes)) (+\(bytes(store.walBytes)) WAL), transaction \(store.transaction)"
        if let last = store.lastTransaction {
            let counts = last.counts.sorted { $0.key < $1.key }.map {
                "\($0.key) +\($0.value.inserted) ~\($0.value.updated) -\($0.value.deleted)"
            }
            storeLine +=
                " (last at \(last.timestamp)\(last.author.map { " by \($0)" } ?? ""): \(counts.joined(separator: ", ")))"
        }
        lines.append(storeLine)
        lines.append("writer: \(stats.writer.queueDepth) queued, \(stats.writer.commits) commits")
        for (name, figures) in [("commit", stats.latency.commit), ("delta", stats.latency.delta)] {
            lines.append(
                "\(name) latency: "
                    + (figures.count == 0
                        ? "no samples"
                        : String(
                            format: "p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms (%lld samples)", figures.p50Ms,
                            figures.p90Ms, figures.p99Ms, figures.maxMs, figures.count)))
        }
        let sent = stats.notificationsSent.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
        lines.append("notifications sent: " + (sent.isEmpty ? "none" : sent.joined(separator: ", ")))
        lines.append("")
        lines.append("sessions (\(stats.sessions.count)):")
        for session in stats.sessions {
            let client = session.client.map { "\($0.name) \($0.version)" } ?? "unnamed"
            lines.append(
                "  \(session.id.prefix(8))  \(client)\(session.key.map { " key \($0)" } ?? "")  subscriptions \(session.subscriptions)  observers \(session.observers)  in flight \(session.inFlight)  backlog \(session.outboundBacklog)  idle \(duration(session.idleSeconds))"
            )
        }
        lines.append("")
        lines.append("result sets (\(stats.subscriptions.count)):")
        for set in stats.subscriptions {
            let request = String(decoding: JSONWriter.encode(set.request), as: UTF8.self)
            lines.append(
                "  \(set.subscriptionIds.joined(separator: ",")): \(set.rows) rows in \(set.sections) sections, \(set.sessions) sessions, \(set.notificationsSent) notifications, at transaction \(set.transaction)\(set.sectionKeyPath.map { ", sections by \($0)" } ?? "")"
            )
            lines.append("    \(request)")
        }
        return lines.joined(separator: "\n")
    }

    private static func duration(_ seconds: Double) -> String {
        if seconds < 60 { return String(format: "%.1fs", seconds) }
        if seconds < 3600 { return "\(Int(seconds) / 60)m\(Int(seconds) % 60)s" }
        return "\(Int(seconds) / 3600)h\(Int(seconds) % 3600 / 60)m"
    }

    private static func bytes(_ count: Int64) -> String {
        if count < 1024 { return "\(count) B" }
        if count < 1 << 20 { return String(format: "%.1f KiB", Double(count) / 1024) }
        return String(format: "%.1f MiB", Double(count) / Double(1 << 20))
    }
}
