import DepotProtocol
import DepotStore
import Foundation

extension DepotService {
    static func registerStatsHandlers(_ handlers: inout HandlerRegistry) {
        handlers.register(
            ServerStats.self, .read, .adminOnly(reason: "the daemon's figures and sessions: no rows of the store")
        ) { (_, context) throws(RPCError) in
            try context.service.statistics()
        }
    }

    /// Everything `server/stats` reports, gathered now.
    func statistics() throws(RPCError) -> ServerStats.Result {
        let now = ContinuousClock.now
        let sets = results.statistics()
        var subscriptionsBySession: [[UInt8]: Int] = [:]
        for set in sets {
            for subscriber in set.subscribers { subscriptionsBySession[subscriber.routingID, default: 0] += 1 }
        }
        let sessionFigures = sessions.all
            .map { session in
                var figures = ServerStats.Session(
                    id: session.id, client: session.clientInfo, key: session.keyName,
                    subscriptions: subscriptionsBySession[session.routingID] ?? 0, observers: session.observers.count,
                    inFlight: session.inFlight.count, outboundBacklog: outboundBacklog(of: session.routingID),
                    idleSeconds: Self.seconds(now - session.lastSeen))
                // The key as the key file says now (SIGHUP may have re-scoped it).
                if let key = session.keyID.flatMap({ keys?.key($0) }) {
                    figures.role = key.roleName
                    figures.scope = key.scope?.summary
                }
                return figures
            }
            .sorted { ($0.client?.name ?? "", $0.id) < ($1.client?.name ?? "", $1.id) }
        let shared = sets.map { set in
            let key = (try? JSONParser.parse(Array(set.key.utf8))) ?? .null
            let section = key["section"]?.stringValue ?? ""
            return ServerStats.SharedResults(
                request: key["request"] ?? .null, sectionKeyPath: section.isEmpty ? nil : section,
                cacheName: set.cacheName, rows: set.rows, sections: set.sections, transaction: set.transaction,
                subscriptionIds: set.subscribers.map(\.id), sessions: Set(set.subscribers.map(\.routingID)).count,
                notificationsSent: set.subscribers.reduce(0) { $0 + stats.notificationsSent(to: $1.id) })
        }
        .sorted { ($0.subscriptionIds.first ?? "") < ($1.subscriptionIds.first ?? "") }
        return ServerStats.Result(
            server: ServerStats.Server(
                name: "depotd", version: configuration.version, uptimeSeconds: Self.seconds(now - stats.startedAt),
                endpoints: boundEndpoints),
            sessions: sessionFigures, subscriptions: shared, notificationsSent: stats.notificationsByMethod,
            writer: ServerStats.Writer(queueDepth: stats.writerQueueDepth, commits: stats.commitCount),
            latency: stats.latency, store: try storeFigures(), storeReads: stats.storeReads)
    }

    private func storeFigures() throws(RPCError) -> ServerStats.StoreFigures {
        let path = configuration.dataDirectory.appendingPathComponent("depot.sqlite").path
        func size(_ path: String) -> Int64 {
            ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
        }
        let latest = try store.latestTransaction()
        let last = latest > 0 ? try store.history(since: latest - 1, limit: 1).transactions.last : nil
        return ServerStats.StoreFigures(
            path: path, sizeBytes: size(path), walBytes: size(path + "-wal"), transaction: latest,
            lastTransaction: last.map(Self.summary))
    }

    /// A transaction's changes counted by entity.
    static func summary(_ record: TransactionRecord) -> ServerStats.TransactionSummary {
        ServerStats.TransactionSummary(
            transaction: record.transaction, timestamp: record.timestamp, author: record.author,
            counts: record.changes.mapValues {
                ServerStats.ChangeCounts(
                    inserted: $0.inserted.count, updated: $0.updated.count, deleted: $0.deleted.count)
            })
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
