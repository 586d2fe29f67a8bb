import DepotProtocol
import DepotStore
import Foundation

extension DepotService {
    static func registerStatsHandlers(_ handlers: inout HandlerRegistry) {
        handlers.register(
            ServerStats.self, .read, .adminOnly(reason: "the daemon's figures and sessions: no rows of the store")
        ) { (params, context) throws(RPCError) in
            try context.core.statistics(params)
        }
        handlers.register(
            ServerBackup.self, .read, .adminOnly(reason: "a copy of the whole store, every row of every key")
        ) { (params, context) throws(RPCError) in
            try backup(params, context: context)
        }
    }

    /// `server/backup`: the store copied on a reader, with pages as progress; a cancel stops it between steps.
    private static func backup(
        _ params: ServerBackup.Parameters, context: RequestContext
    ) throws(RPCError) -> ServerBackup.Result {
        let progress = context.progress(token: params.workDoneToken)
        progress?.begin(title: "Backing up the store to \(params.destination)", total: nil)
        var copied: Int64 = 0
        do throws(RPCError) {
            let copy = try context.view.unscopedStore().backup(into: params.destination) {
                (done, total) throws(RPCError) in
                copied = done
                progress?.setTotal(total)
                progress?.report(completed: done, message: "pages")
                try context.cancellation.check()
            }
            progress?.end(completed: copied, cancelled: false, message: "as of transaction \(copy.transaction)")
            context.core.logger.info(
                "backup to \(copy.path): transaction \(copy.transaction), \(copy.sizeBytes) bytes")
            return ServerBackup.Result(transaction: copy.transaction, path: copy.path, sizeBytes: copy.sizeBytes)
        } catch {
            progress?.end(completed: copied, cancelled: error.code == .requestCancelled)
            throw error
        }
    }

    /// Everything `server/stats` reports, gathered now: one page of the sessions.
    func statistics(_ page: ServerStats.Parameters = .init()) throws(RPCError) -> ServerStats.Result {
        let limit = page.sessionLimit ?? ServerStats.Parameters.defaultSessionLimit
        // The params' bounds (1 to largestSessionLimit) are checked before the handler runs.
        try page.checkBounds(field: "params")
        let after = try page.sessionsAfter.map { (cursor) throws(RPCError) -> SessionCursor in
            guard let parsed = SessionCursor(cursor) else {
                throw .invalidParams(
                    "params.sessionsAfter must be the nextSessionsAfter of an earlier answer, got '\(cursor)'",
                    field: "params.sessionsAfter")
            }
            return parsed
        }
        let now = ContinuousClock.now
        let sets = results.statistics()
        var subscriptionsBySession: [[UInt8]: Int] = [:]
        for set in sets {
            for subscriber in set.subscribers { subscriptionsBySession[subscriber.routingID, default: 0] += 1 }
        }
        // Sorted by their keys first, then only one page is turned into figures.
        let ordered = sessions.all.map { (SessionCursor($0), $0) }
            .filter { key, _ in after.map { key > $0 } ?? true }
            .sorted { $0.0 < $1.0 }
        let pageSessions = ordered.prefix(limit)
        let next = ordered.count > limit ? pageSessions.last.map { $0.0.text } : nil
        let observerCounts = observers.counts(of: pageSessions.map(\.1.routingID))
        let sessionFigures = pageSessions.map(\.1)
            .map { session in
                var figures = ServerStats.Session(
                    id: session.id, client: session.clientInfo, key: session.keyName,
                    subscriptions: subscriptionsBySession[session.routingID] ?? 0,
                    observers: observerCounts[session.routingID] ?? 0,
                    inFlight: session.inFlight.count, outboundBacklog: outboundBacklog(of: session.routingID),
                    idleSeconds: Self.seconds(now - session.lastSeen))
                // The key as the key file says now (SIGHUP may have re-scoped it).
                if let key = session.keyID.flatMap({ keys?.key($0) }) {
                    figures.role = key.roleName
                    figures.scope = key.scope?.summary
                }
                return figures
            }
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
                endpoints: boundEndpoints, sessionCount: sessions.count, maxSessions: configuration.maxSessions,
                maxSessionsRequested: configuration.requestedMaxSessions, openFileLimit: configuration.openFileLimit,
                ioThreads: configuration.ioThreads, listenBacklog: configuration.listenBacklog),
            sessions: sessionFigures, nextSessionsAfter: next, subscriptions: shared,
            notificationsSent: stats.notificationsByMethod,
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

    /// Where a session sorts in `server/stats`: by client name (its UTF-8 bytes), then id;
    /// as text, the cursor `sessionsAfter` takes (the id, a space, the name).
    struct SessionCursor: Comparable {
        let name: [UInt8]
        let id: [UInt8]

        init(_ session: Session) {
            name = Array((session.clientInfo?.name ?? "").utf8)
            id = Array(session.id.utf8)
        }

        init?(_ text: String) {
            let bytes = Array(text.utf8)
            guard let space = bytes.firstIndex(of: UInt8(ascii: " ")) else { return nil }
            id = Array(bytes[..<space])
            name = Array(bytes[(space + 1)...])
        }

        var text: String { String(decoding: id + [UInt8(ascii: " ")] + name, as: UTF8.self) }

        static func < (left: SessionCursor, right: SessionCursor) -> Bool {
            left.name.lexicographicallyPrecedes(right.name)
                || (left.name == right.name && left.id.lexicographicallyPrecedes(right.id))
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
