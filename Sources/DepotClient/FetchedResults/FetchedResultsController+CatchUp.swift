import DepotProtocol
import Foundation

/// How a controller with a persistent store last brought its stored results up to date
/// (DESIGN.md §9): by catching up (a resumed subscription naming only the rows that changed
/// since the stored transaction, and only the changed objects), or by a full resync where
/// history no longer reached back or the rebuilt ids did not match the daemon's.
public struct FetchedResultsCatchUp: Hashable, Sendable {
    /// The transaction the stored results reflected.
    public var since: Int64
    /// The transaction the results reflect now.
    public var transaction: Int64
    /// Whether the results were fetched in full (history did not reach back to ``since``, or
    /// the rebuilt ids did not match the daemon's digest) rather than caught up.
    public var resynced: Bool
    /// The transactions the catch-up spanned (0 after a resync).
    public var historyTransactions: Int
    /// The objects whose values were fetched: the changed and new ones after a catch-up,
    /// every object the subscribe answer carried after a resync.
    public var objectsFetched: Int

    /// Creates a record.
    public init(since: Int64, transaction: Int64, resynced: Bool, historyTransactions: Int, objectsFetched: Int) {
        self.since = since
        self.transaction = transaction
        self.resynced = resynced
        self.historyTransactions = historyTransactions
        self.objectsFetched = objectsFetched
    }
}

extension FetchedResultsController {
    /// How the stored results were last brought up to date; `nil` until they were.
    public var lastCatchUp: FetchedResultsCatchUp? { state.withLock { $0.lastCatchUp } }

    /// The most objects asked of `store/get` at a time.
    private static var catchUpPage: Int { 1000 }

    /// Brings the stored results shown (no subscription yet) up to date with a resumed
    /// subscription (DESIGN.md §7, Resuming): subscribes with `resume` (the stored transaction
    /// and the stored ids' digest), rebuilds the current ids from the rows the answer names,
    /// checks them against the answer's digest, fetches the changed objects it holds that the
    /// answer did not carry (and, unbatched, the new ones), and reports the difference as one
    /// ordinary change. Grouped requests resume the same way (a group's values always come with
    /// the answer).
    ///
    /// - Returns: `false`, having left no subscription behind, when it cannot catch up (no stored
    ///   results, history that does not reach back, a digest that differs): then resync in full.
    func catchUp() async throws(DepotClientError) -> Bool {
        var (stored, storedTransaction, request, entries) = state.withLock {
            ($0.layout, $0.transaction, $0.fetchRequest, $0.entries)
        }
        guard let stored, let since = storedTransaction else { return false }
        // Results kept in another model's shape are never caught up (DESIGN.md §9): the daemon answers
        // in full where a migration came since the stored transaction.
        let unbatched = request.fetchBatchSize == 0
        let include: ResultsInclude = unbatched || request.isGrouped ? .all : .firstBatch
        let answer = try await connection.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: sectionNameKeyPath, cacheName: cacheName, include: include,
                coalesceMs: coalesceMilliseconds,
                resume: ResultsResume(transaction: since, digest: ResultsDigest.of(stored.ids))))
        let subscription = answer.subscription
        let abandon = { [connection] () async in
            _ = try? await connection.call(ResultsUnsubscribe.self, .init(subscription: subscription))
        }
        // A full answer (history no longer reaches back), or one that does not rebuild the daemon's ids.
        guard answer.resumed == true, let layout = try? ResultsLayout(resuming: stored, with: answer),
            let digest = answer.digest, ResultsDigest.of(layout.ids) == digest
        else {
            await abandon()
            return false
        }

        // The values: the answer's, for changed objects held and (unbatched) objects not held;
        // the other changed objects held, from store/get.
        var held = Set(entries.keys)
        if let (file, key) = state.withLock({ $0.replica }) {
            do throws(DepotClientError) {
                held.formUnion(try file.storedIDs(key: key))
            } catch {
                await abandon()
                throw error
            }
        }
        var fetched: [String: DepotObject] = [:]
        var wanted: [String] = []
        do throws(DepotClientError) {
            for row in answer.changed ?? [] where row.indexPath != nil && (held.contains(row.id) || unbatched) {
                if let json = row.object, !json.isNull {
                    fetched[row.id] = try Self.row(json, of: request)
                } else if !request.isGrouped {
                    wanted.append(row.id)
                }
            }
        } catch {
            await abandon()
            throw error
        }
        var start = 0
        while start < wanted.count {
            let ids = Array(wanted[start..<min(start + Self.catchUpPage, wanted.count)])
            let loaded: StoreGet.Result
            do throws(DepotClientError) {
                loaded = try await connection.call(StoreGet.self, .init(ids: ids, properties: request.properties))
            } catch {
                await abandon()
                throw error
            }
            // A null is an object deleted since the answer: the delete is on its way.
            do throws(DepotClientError) {
                for json in loaded.objects where !json.isNull {
                    let raw = try DepotObject(json: json)
                    fetched[raw.id] = raw
                }
            } catch {
                await abandon()
                throw error
            }
            start += ids.count
        }

        let difference = ResultsDifference(
            from: stored, to: layout, changed: Set(fetched.keys).filter { held.contains($0) })
        // Moved objects that did not change keep their values: from memory, or else from the file.
        let unloaded = difference.objects.filter { $0.type == .move && fetched[$0.id] == nil && entries[$0.id] == nil }
        if !unloaded.isEmpty {
            fillFromPersistentStore(ids: unloaded.map(\.id))
            entries = state.withLock { $0.entries }
        }
        let change = ResultsDidChange.Parameters(
            subscription: subscription, seq: layout.seq, transaction: answer.transaction,
            transactions: [min(since + 1, answer.transaction), answer.transaction],
            sections: difference.sections,
            objects: difference.objects.map { object in
                var object = object
                guard object.type != .delete, let value = fetched[object.id] ?? entries[object.id]?.raw else {
                    return object
                }
                // A group travels as its dictionary with its id, as in the daemon's changes.
                var group = value.values
                group["id"] = .string(object.id)
                object.object = request.isGrouped ? .object(group) : value.json
                return object
            })
        // The difference must take the stored results to the daemon's; should it not, resync.
        var check = stored
        check.seq = layout.seq - 1
        guard (try? check.apply(change)) != nil, check.sections == layout.sections else {
            await abandon()
            return false
        }
        let record = FetchedResultsCatchUp(
            since: since, transaction: answer.transaction, resynced: false,
            historyTransactions: Int(max(0, answer.transaction - since)), objectsFetched: fetched.count)
        state.withLock { state in
            state.subscription = subscription
            state.subscribesOnReconnect = false
            state.lastCatchUp = record
        }
        if difference.isEmpty {
            state.withLock { state in
                state.layout = layout
                state.transaction = answer.transaction
            }
        } else {
            await commit(change, layout: layout)
        }
        persistBehind()
        return true
    }
}

extension FetchedResultsController {
    /// Records that the stored results were replaced in full by `fetched`.
    func recordResync(_ fetched: Fetched) {
        state.withLock { state in
            state.lastCatchUp = FetchedResultsCatchUp(
                since: state.transaction ?? 0, transaction: fetched.transaction, resynced: true,
                historyTransactions: 0, objectsFetched: fetched.entries.count)
        }
    }
}
