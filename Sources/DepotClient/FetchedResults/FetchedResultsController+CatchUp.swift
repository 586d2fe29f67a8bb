import DepotProtocol
import Foundation

/// How a controller with a persistent store last brought its stored results up to date
/// (DESIGN.md §9): by catching up (the current ids, `store/history` since the stored
/// transaction, and only the changed objects), or by a full resync where history no longer
/// reached back.
public struct FetchedResultsCatchUp: Hashable, Sendable {
    /// The transaction the stored results reflected.
    public var since: Int64
    /// The transaction the results reflect now.
    public var transaction: Int64
    /// Whether the results were fetched in full (history did not reach back to ``since``,
    /// or the request is grouped) rather than caught up.
    public var resynced: Bool
    /// The transactions read from `store/history` (0 after a resync).
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

    /// The most transactions asked of `store/history` at a time, and objects of `store/get`.
    private static var catchUpPage: Int { 1000 }

    /// Brings the stored results shown (no subscription yet) up to date: subscribes for the ids
    /// only, reads `store/history` since the stored transaction, fetches the objects that changed
    /// (and, unbatched, the new ones), and reports the difference as one ordinary change.
    ///
    /// - Returns: `false`, having left no subscription behind, when it cannot catch up (no stored
    ///   results, a grouped request, history that does not reach back): then resync in full.
    func catchUp() async throws(DepotClientError) -> Bool {
        var (stored, storedTransaction, request, entries) = state.withLock {
            ($0.layout, $0.transaction, $0.fetchRequest, $0.entries)
        }
        guard let stored, let since = storedTransaction, !request.isGrouped else { return false }
        // Results kept in another model's shape are fetched again, never caught up (DESIGN.md §9).
        guard await storedModelIsCurrent() else { return false }
        let subscribed = try await connection.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: sectionNameKeyPath, cacheName: cacheName, include: .noObjects,
                coalesceMs: coalesceMilliseconds))
        let subscription = subscribed.subscription
        let abandon = { [connection] () async in
            _ = try? await connection.call(ResultsUnsubscribe.self, .init(subscription: subscription))
        }
        let snapshot: ResultsSnapshot.Result
        let layout: ResultsLayout
        do throws(DepotClientError) {
            snapshot = try await connection.call(ResultsSnapshot.self, .init(subscription: subscription))
            do {
                layout = try ResultsLayout(snapshot: snapshot)
            } catch {
                throw .invalidResponse("results/snapshot: \(error)")
            }
        } catch {
            await abandon()
            throw error
        }
        let history: (changed: Set<String>, transactions: Int)?
        do throws(DepotClientError) {
            history = try await changedIDs(since: since, through: snapshot.transaction)
        } catch {
            await abandon()
            throw error
        }
        guard let history else {
            await abandon()
            return false
        }

        // The values to fetch: changed objects held (in memory or in the file), and (unbatched)
        // objects not held.
        var held = Set(entries.keys)
        if let (file, key) = state.withLock({ $0.replica }) {
            do throws(DepotClientError) {
                held.formUnion(try file.storedIDs(key: key))
            } catch {
                await abandon()
                throw error
            }
        }
        let unbatched = request.fetchBatchSize == 0
        let wanted = layout.ids.filter { held.contains($0) ? history.changed.contains($0) : unbatched }
        var fetched: [String: DepotObject] = [:]
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
            // A null is an object deleted since the snapshot: the delete is on its way.
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
            subscription: subscription, seq: layout.seq, transaction: snapshot.transaction,
            transactions: [min(since + 1, snapshot.transaction), snapshot.transaction],
            sections: difference.sections,
            objects: difference.objects.map { object in
                var object = object
                if object.type != .delete { object.object = (fetched[object.id] ?? entries[object.id]?.raw)?.json }
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
            since: since, transaction: snapshot.transaction, resynced: false,
            historyTransactions: history.transactions, objectsFetched: fetched.count)
        state.withLock { state in
            state.subscription = subscription
            state.subscribesOnReconnect = false
            state.lastCatchUp = record
        }
        if difference.isEmpty {
            state.withLock { state in
                state.layout = layout
                state.transaction = snapshot.transaction
            }
        } else {
            await commit(change, layout: layout)
        }
        persistBehind()
        return true
    }

    /// The ids that `store/history` says were inserted or updated after `since`, up to `through`
    /// at least, and how many transactions that read; `nil` when history does not reach back.
    private func changedIDs(since: Int64, through: Int64) async throws(DepotClientError) -> (
        changed: Set<String>, transactions: Int
    )? {
        var changed: Set<String> = []
        var transactions = 0
        var after = since
        while after < through {
            let page: StoreHistory.Result
            do throws(DepotClientError) {
                page = try await connection.call(StoreHistory.self, .init(since: after, limit: Self.catchUpPage))
            } catch  where error.rpcError?.code == .invalidParams {
                // "this daemon's history begins after …" (a replica that joined from a snapshot).
                return nil
            }
            // Transaction after+1 was pruned (or never kept): some changes are unknown.
            if page.oldest > after + 1 && page.latest > after { return nil }
            guard let last = page.transactions.last else { break }
            for record in page.transactions {
                for changes in record.changes.values {
                    changed.formUnion(changes.inserted)
                    changed.formUnion(changes.updated.map(\.id))
                }
            }
            transactions += page.transactions.count
            after = last.transaction
        }
        return (changed, transactions)
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
