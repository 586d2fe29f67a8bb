import DepotProtocol
import Foundation

/// Replaying the queue (DESIGN.md §9): the queued saves sent in order over a connection with a
/// session, each one's permanent ids and versions rewritten into the saves after it, committed ones
/// removed and refused ones moved to the failed saves, in the file as they go. The context that owns
/// the queue hears of each commit and refusal, and shows what the store kept afterwards.
extension OfflineSaveQueue {
    /// How a replay ended, and what it touched.
    struct ReplayOutcome {
        /// Why it stopped.
        enum End {
            /// The queue was empty.
            case nothingQueued
            /// Every queued save was sent: committed or refused.
            case replayed
            /// The daemon went out of reach, or the file could not be written: the rest stays queued.
            case stopped
            /// A transient error with the session still open: replay again shortly.
            case retryLater
        }

        var end: End
        /// The objects the sent saves touched, for the file to hold the store's copies afterwards.
        var touched = ReplayedObjects()
        /// The temporary ids of inserts still queued.
        var stillQueued: Set<String> = []
        /// How the last write to the file went (`nil`: nothing was written or read).
        var lastWrite: Result<Void, DepotClientError>?
    }

    /// Sends the queued saves in order over `connection` while it has a session. After each commit
    /// the file drops the save and rewrites the rest (``Pending/rebased(after:result:)``), then
    /// `committed` hears of it; a save the daemon refuses moves to the failed saves and `refused`
    /// hears of it. A transient error or a lost session leaves the save queued, to be resent with
    /// its `saveId` (so it applies at most once).
    func replay(
        on connection: DepotConnection,
        committed: (StoreSave.Parameters, StoreSave.Result) -> Void,
        refused: (FailedSave) -> Void
    ) async -> ReplayOutcome {
        var queue: [Pending]
        do {
            queue = try pending()
        } catch {
            return ReplayOutcome(end: .stopped, lastWrite: .failure(error))
        }
        guard !queue.isEmpty else { return ReplayOutcome(end: .nothingQueued) }
        var outcome = ReplayOutcome(end: .replayed)
        var index = 0
        defer { outcome.stillQueued = Set(queue[index...].flatMap { $0.params.inserted.compactMap(\.tempId) }) }
        while index < queue.count {
            guard connection.state == .connected else {
                outcome.end = .stopped
                return outcome
            }
            let save = queue[index]
            let result: StoreSave.Result
            do throws(DepotClientError) {
                result = try await connection.call(StoreSave.self, save.params)
            } catch .server(let error) where !Self.transientCodes.contains(error.code) {
                // Refused (conflict, constraint, validation, scope): reported, kept until dismissed.
                index += 1
                do throws(DepotClientError) {
                    try fail(save, error: error)
                    outcome.lastWrite = .success(())
                } catch {
                    outcome.lastWrite = .failure(error)
                }
                outcome.touched.add(save.params, result: nil)
                refused(FailedSave(number: save.number, change: save.params, error: error))
                continue
            } catch {
                // Out of reach, a transient error, or an answer that could not be read.
                if case .server = error { outcome.end = .retryLater } else { outcome.end = .stopped }
                return outcome
            }
            index += 1
            let rest = queue[index...].map { $0.rebased(after: save.params, result: result) }
            queue.replaceSubrange(index..., with: rest)
            do throws(DepotClientError) {
                try complete(save.number, rewriting: rest)
                outcome.lastWrite = .success(())
            } catch {
                outcome.lastWrite = .failure(error)
                outcome.end = .stopped
                return outcome
            }
            committed(save.params, result)
            outcome.touched.add(save.params, result: result)
        }
        return outcome
    }

    /// Errors that say nothing of the save itself (a session lost, a daemon busy or failing, a
    /// cancellation): the save stays queued and replays at the next session.
    static let transientCodes: Set<ErrorCode> = [
        .serverNotInitialized, .requestCancelled, .serverCancelled, .overloaded, .internalError,
    ]
}

extension OfflineSaveQueue.Pending {
    /// This save rewritten for after `params` committed with `result`: temporary ids that save
    /// inserted become permanent, and versions it moved on are the new ones.
    func rebased(after params: StoreSave.Parameters, result: StoreSave.Result) -> Self {
        var versions: [String: (from: Int64?, to: Int64)] = [:]
        for update in params.updated {
            if let version = result.versions[update.id] { versions[update.id] = (update.version, version) }
        }
        for id in result.ids.values {
            if let version = result.versions[id] { versions[id] = (nil, version) }
        }
        func resolve(_ value: JSONValue) -> JSONValue {
            switch value {
            case .string(let text): .string(result.ids[text] ?? text)
            case .array(let elements): .array(elements.map(resolve))
            case .object(let members): .object(members.mapValues(resolve))
            default: value
            }
        }
        func rebased(_ id: String, _ version: Int64?) -> (String, Int64?) {
            let id = result.ids[id] ?? id
            guard let moved = versions[id], moved.from == version else { return (id, version) }
            return (id, moved.to)
        }
        var next = self
        next.params.inserted = self.params.inserted.map { insert in
            var insert = insert
            insert.values = insert.values.mapValues(resolve)
            return insert
        }
        next.params.updated = self.params.updated.map { update in
            var update = update
            (update.id, update.version) = rebased(update.id, update.version)
            update.values = update.values.mapValues(resolve)
            update.original = update.original?.mapValues(resolve)
            return update
        }
        next.params.deleted = self.params.deleted.map { delete in
            var delete = delete
            (delete.id, delete.version) = rebased(delete.id, delete.version)
            return delete
        }
        return next
    }
}

/// The objects replayed saves touched (``OfflineSaveQueue/replay(on:committed:refused:)``): permanent ids to read back from
/// the store, and the temporary ids their inserts were queued under.
struct ReplayedObjects {
    /// Permanent ids: inserted (as the store numbered them), updated, deleted.
    private(set) var ids: Set<String> = []
    /// Temporary ids of inserts, replayed or refused.
    private(set) var temporary: Set<String> = []

    /// Adds a save's objects: `result` is the store's answer, `nil` when it refused the save.
    mutating func add(_ params: StoreSave.Parameters, result: StoreSave.Result?) {
        for insert in params.inserted {
            guard let tempID = insert.tempId else { continue }
            temporary.insert(tempID)
            if let id = result?.ids[tempID] { ids.insert(id) }
        }
        for update in params.updated where !update.id.hasPrefix("temp-") { ids.insert(update.id) }
        for delete in params.deleted where !delete.id.hasPrefix("temp-") { ids.insert(delete.id) }
    }
}
