import DepotStore
import Foundation
import Synchronization

/// The NOTIFY payload of the cluster's log (docs/cluster.md): the number of the newest entry one
/// commit appended and, when they fit under PostgreSQL's 8000-byte limit, the entries themselves,
/// so that another daemon applies them without reading the log.
///
/// A hint only: the log decides. A follower takes hinted entries only when they follow its
/// position exactly (``HintedEntries``); otherwise it reads the log as without them.
///
/// The payload is the head's number and the committing daemon's node name (its own hints need no
/// catch-up: its writes applied them), then one line per entry:
/// `number checksum changeset changes`, where `checksum` is decimal or `-`, `changeset` is
/// base64 or `-`, and `changes` is the log's `changes` JSON (one line: JSON escapes newlines).
enum LogHint {
    /// The longest payload sent with entries (PostgreSQL refuses 8000 bytes and more).
    static let maximumPayload = 7_900

    /// The payload announcing `entries`, appended by `node` in one statement; `changes` holds each
    /// one's `changes` column. The entries are left out when they do not fit.
    static func payload(for entries: [ReplicatedEntry], changes: [String], node: String) -> String {
        guard let last = entries.last else { return "" }
        let header = "\(last.number) \(node)"
        var payload = header
        var size = payload.utf8.count
        for (entry, changes) in zip(entries, changes) {
            let changeset: String =
                if case .data(_, _, let changeset, _) = entry.content, !changeset.isEmpty {
                    Data(changeset).base64EncodedString()
                } else { "-" }
            let checksum = entry.checksum.map(String.init) ?? "-"
            // Counted before it is built: a big changeset is never joined into a string only to be dropped.
            size +=
                4 + String(entry.number).utf8.count + checksum.utf8.count + changeset.utf8.count + changes.utf8.count
            guard size <= maximumPayload else { return header }
            payload += "\n\(entry.number) \(checksum) \(changeset) \(changes)"
        }
        return payload
    }

    /// The head a payload announces and the node that appended it (empty if unnamed); `nil` when
    /// it is not one of ours (a follower then reads the log).
    static func header(of payload: String) -> (head: Int64, node: Substring)? {
        let fields = payload[..<(payload.firstIndex(of: "\n") ?? payload.endIndex)].split(
            separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = fields.first, let head = Int64(first) else { return nil }
        return (head, fields.count > 1 ? fields[1] : "")
    }

    /// The entries a payload carries, in order; empty when it carries none or is malformed.
    static func entries(in payload: String) -> [ReplicatedEntry] {
        var entries: [ReplicatedEntry] = []
        for line in payload.split(separator: "\n", omittingEmptySubsequences: false).dropFirst() {
            let fields = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard fields.count == 4, let number = Int64(fields[0]) else { return [] }
            let checksum: Int64?
            if fields[1] == "-" {
                checksum = nil
            } else if let value = Int64(fields[1]) {
                checksum = value
            } else {
                return []
            }
            let changeset: Data?
            if fields[2] == "-" {
                changeset = nil
            } else if let data = Data(base64Encoded: String(fields[2])) {
                changeset = data
            } else {
                return []
            }
            guard
                var entry = try? PostgresReplication.decode(
                    number: number, json: String(fields[3]), changeset: changeset)
            else { return [] }
            entry.checksum = checksum
            entries.append(entry)
        }
        return entries
    }
}

/// The entries a follower heard in NOTIFY payloads (``LogHint``) and its store has not applied
/// yet, for ``PostgresReplication/entries(after:limit:)`` to answer from without a round trip.
///
/// It answers only with a run that starts right after the store's position and reaches the newest
/// entry heard of (by a hint or the follower's poll of the head): otherwise it may miss an entry
/// whose hint carried none, and the log is read as without hints.
final class HintedEntries: Sendable {
    private struct State {
        var entries: [Int64: ReplicatedEntry] = [:]
        /// The newest entry heard of.
        var heard: Int64 = 0
    }

    /// The most entries kept; past it they are dropped and the log is read instead.
    static let capacity = 4_096

    private let state = Mutex(State())

    /// Records a hint for the head `head` with `entries`, forgetting those at or before `position`.
    func hear(head: Int64, entries: [ReplicatedEntry], after position: Int64) {
        state.withLock { state in
            state.heard = max(state.heard, head)
            if state.entries.count + entries.count > Self.capacity {
                state.entries = state.entries.filter { $0.key > position }
                if state.entries.count + entries.count > Self.capacity { state.entries = [:] }
            }
            for entry in entries where entry.number > position { state.entries[entry.number] = entry }
        }
    }

    /// Records that the log's head is at least `head` (the follower read it).
    func sawHead(_ head: Int64) {
        state.withLock { $0.heard = max($0.heard, head) }
    }

    /// Up to `limit` heard entries right after `position`, if they reach every entry heard of and
    /// end no group halfway; `nil` (read the log) otherwise.
    func take(after position: Int64, limit: Int) -> [ReplicatedEntry]? {
        state.withLock { state -> [ReplicatedEntry]? in
            guard !state.entries.isEmpty else { return nil }
            // What the store applied is never needed again.
            state.entries = state.entries.filter { $0.key > position }
            guard state.heard > position else { return nil }
            var run: [ReplicatedEntry] = []
            var next = position + 1
            while run.count < limit, let entry = state.entries[next] {
                run.append(entry)
                next += 1
            }
            guard let last = run.last else { return nil }
            if run.count < limit {
                guard last.number >= state.heard else { return nil }
                if case .data(_, _, _, continued: true) = last.content { return nil }
            }
            state.entries = state.entries.filter { $0.key > last.number }
            return run
        }
    }

    /// Forgets every entry (the follower reconnected: what it missed is read from the log).
    func reset() {
        state.withLock { $0 = State() }
    }
}
