import DepotStore
import Foundation
import Logging
import PostgresNIO

/// What the cluster's log keeps (DESIGN.md section 11): an entry goes once it is past
/// `--log-retention` and every daemon seen within the grace period has applied it.
///
/// Each daemon records in ``ChangeLog/positions`` the newest entry it applied, and when; a
/// daemon not seen for longer than ``grace`` no longer holds entries back, and rebuilds itself
/// from a snapshot when it comes back. Whatever the retention, the log keeps its newest entry
/// (writers number after it) and its newest entry with a history number, a save or a migration
/// (a snapshot takes its history number from it). Any daemon may prune: the statement is one `DELETE`, idempotent.
public struct LogPruning: Sendable {
    /// The log it prunes.
    public let log: ChangeLog
    /// How much of the log to keep, as `--history-retention` says it for history: a count, an
    /// age, a size, several at once (whichever keeps less), or `forever` (no pruning).
    public let retention: HistoryRetention
    /// How long after a daemon last recorded its position it still holds entries back.
    public let grace: Duration

    /// A pruning policy for `log`.
    public init(log: ChangeLog, retention: HistoryRetention, grace: Duration) {
        self.log = log
        self.retention = retention
        self.grace = grace
    }

    /// Whether it ever removes anything.
    public var prunes: Bool { retention != .forever }

    /// Records that `node` has applied every entry up to `position`, now.
    func record(node: String, position: Int64, on connection: PostgresConnection, logger: Logger)
        async throws(ChangeLogError)
    {
        try await mappingErrors {
            try await connection.query(
                """
                INSERT INTO \(unescaped: log.positions) (node, "position", seen_at)
                VALUES (\(node), \(position), clock_timestamp())
                ON CONFLICT (node) DO UPDATE SET "position" = excluded."position", seen_at = excluded.seen_at
                """, logger: logger)
        }
    }

    /// Deletes the entries the policy no longer keeps, then, if any went, vacuums the log so that
    /// new entries reuse their space; returns how many went.
    ///
    /// Without the `VACUUM` the table would grow by every entry ever written until autovacuum came
    /// by (a minute apart by default, and only past its thresholds): the rows stay flat, the size
    /// does not. The log holds the retention plus a prune interval's entries, so each vacuum reads
    /// little; `SKIP_LOCKED` lets another daemon's vacuum of the same table go first.
    func prune(on connection: PostgresConnection, logger: Logger) async throws(ChangeLogError) -> Int64 {
        guard prunes else { return 0 }
        return try await mappingErrors {
            let removed =
                try await connection.query(PostgresQuery(unsafeSQL: pruneStatement), logger: logger)
                .collect().first?.decode(Int64.self) ?? 0
            if removed > 0 {
                try await connection.query(PostgresQuery(unsafeSQL: "VACUUM (SKIP_LOCKED) \(log.log)"), logger: logger)
            }
            return removed
        }
    }

    /// The `DELETE` that prunes, returning how many entries went.
    var pruneStatement: String {
        let log = log.log
        return """
            WITH bound AS (
                SELECT least(
                    (SELECT coalesce(max("transaction"), 0) - 1 FROM \(log)),
                    (SELECT coalesce(max("transaction"), 0) - 1 FROM \(log) WHERE changes->>'transaction' IS NOT NULL),
                    (SELECT min("position") FROM \(self.log.positions)
                        WHERE seen_at > clock_timestamp() - make_interval(secs => \(Self.seconds(grace)))),
                    \(bound(retention))) AS last),
            pruned AS (DELETE FROM \(log) WHERE "transaction" <= (SELECT last FROM bound) RETURNING 1)
            SELECT count(*)::bigint FROM pruned
            """
    }

    /// The newest entry `retention` lets go, as an SQL expression (0: none).
    private func bound(_ retention: HistoryRetention) -> String {
        let log = log.log
        switch retention {
        case .count(let count):
            return "(SELECT coalesce(max(\"transaction\"), 0) - \(count) FROM \(log))"
        case .age(let seconds):
            return """
                (SELECT coalesce(max("transaction"), 0) FROM \(log)
                    WHERE committed_at < clock_timestamp() - make_interval(secs => \(seconds)))
                """
        case .size(let bytes):
            // The newest entries that fit in `bytes`, counting each one's JSON and changeset.
            return """
                (SELECT coalesce(max("transaction"), 0) FROM (
                    SELECT "transaction", sum(octet_length(changes::text) + coalesce(octet_length(changeset), 0))
                        OVER (ORDER BY "transaction" DESC) AS kept
                    FROM \(log)) sizes
                    WHERE kept > \(bytes))
                """
        case .all(let bounds):
            // Whichever keeps less, as history's retention combines them.
            return "greatest(\(bounds.map(bound).joined(separator: ", ")))"
        case .forever:
            return "0"
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
