import DepotProtocol
import Foundation

/// Runs `body` isolated to `actor`: how callbacks reach the caller-chosen delivery actor.
/// What a controller listens to: the connection's notifications and link events, merged.
final class ControllerInputs: Sendable {
    enum Input: Sendable {
        case notification(ServerNotification)
        case connection(ConnectionEvent)
    }

    let stream: AsyncStream<Input>
    private let forwarders: [Task<Void, Never>]

    /// Registers with `connection` at once, so that nothing sent after this returns is missed.
    init(connection: DepotConnection) {
        let (stream, continuation) = AsyncStream.makeStream(of: Input.self, bufferingPolicy: .unbounded)
        let notifications = connection.notifications()
        let events = connection.connectionEvents()
        self.stream = stream
        forwarders = [
            Task {
                for await notification in notifications { continuation.yield(.notification(notification)) }
                continuation.finish()
            },
            Task {
                for await event in events { continuation.yield(.connection(event)) }
            },
        ]
    }

    func cancel() { forwarders.forEach { $0.cancel() } }
}

typealias Inputs = ControllerInputs

extension FetchedResultsController {
    func handle(_ input: ControllerInputs.Input) async {
        switch input {
        case .notification(let notification):
            if let change = notification.decode(ResultsDidChange.self) {
                await apply(change)
            } else if let invalidation = notification.decode(ResultsDidInvalidate.self),
                invalidation.subscription == subscription
            {
                if invalidation.reason == "model" {
                    await resubscribeAfterMigration(invalidation)
                } else {
                    await resync(resubscribe: false)
                }
            }
        case .connection(.reconnected):
            await resync(resubscribe: true)
        case .connection(.disconnected):
            break
        }
    }

    private func apply(_ change: ResultsDidChange.Parameters) async {
        let (subscription, layout) = state.withLock { ($0.subscription, $0.layout) }
        guard change.subscription == subscription, var next = layout else { return }
        if change.seq <= next.seq {
            // Already counted in the layout (it came from a later snapshot): keep only the values.
            state.withLock { state in
                for object in change.objects {
                    if object.type == .delete {
                        state.entries[object.id] = nil
                        if state.replica != nil { state.replicaWrites.remove(object.id) }
                    } else if let json = object.object, let raw = try? Self.row(json, of: state.fetchRequest) {
                        Self.store(raw, in: &state, onlyIfNewer: false)
                    }
                }
            }
            return
        }
        do {
            try next.apply(change)
        } catch {
            await resync(resubscribe: false)
            return
        }
        let layoutAfter = next
        await commit(change, layout: layoutAfter)
        persistBehind()
    }

    /// Installs the new layout and tells the delegate and the change streams (on the main actor,
    /// where the delegate lives).
    @MainActor
    func commit(_ change: ResultsDidChange.Parameters, layout: ResultsLayout) {
        let delegate = self.delegate
        delegate?.controllerWillChangeContent(self)
        var deleted: [String: Entry] = [:]
        let (entries, isCurrent) = state.withLock { state -> ([String: Entry], Bool) in
            guard state.subscription == change.subscription else { return ([:], false) }
            state.layout = layout
            state.transaction = change.transaction
            state.indexPaths = nil
            // The related objects first: the delegate, told of a row's update, reads its relationships.
            let related = Self.relatedObjects(change.related)
            state.related.merge(related) { _, new in new }
            for id in change.relatedRemoved ?? [] { state.related[id] = nil }
            if state.replica != nil {
                state.replicaWrites.relate(changed: related.keys, removed: change.relatedRemoved ?? [])
            }
            for object in change.objects {
                if object.type == .delete {
                    deleted[object.id] = state.entries.removeValue(forKey: object.id)
                    if state.replica != nil { state.replicaWrites.remove(object.id) }
                } else if let json = object.object, let raw = try? Self.row(json, of: state.fetchRequest) {
                    Self.store(raw, in: &state, onlyIfNewer: false)
                }
            }
            return (state.entries, true)
        }
        var sectionChanges: [FetchedResultsChangeSet<Object>.SectionChange] = []
        for section in change.sections.sorted(by: {
            ($0.type == .delete ? 0 : 1, $0.index) < ($1.type == .delete ? 0 : 1, $1.index)
        }) {
            let count = section.type == .insert ? layout.sections[section.index].ids.count : 0
            let info = SectionDescription(
                name: section.name, indexTitle: sectionIndexTitle(forSectionName: section.name), numberOfObjects: count)
            let type = FetchedResultsChangeType(section.type)
            delegate?.controller(self, didChange: info, atSectionIndex: section.index, for: type)
            sectionChanges.append(.init(type: type, index: section.index, name: section.name))
        }
        var objectChanges: [FetchedResultsChangeSet<Object>.ObjectChange] = []
        for object in change.objects {
            let entry = object.type == .delete ? deleted[object.id] : entries[object.id]
            let type = FetchedResultsChangeType(object.type)
            let indexPath = object.type == .insert ? nil : IndexPath(wire: object.indexPath)
            let newIndexPath = object.type == .delete ? nil : IndexPath(wire: object.newIndexPath)
            let anObject: Any = entry?.object ?? entry?.raw ?? DepotObject.fault(id: object.id)
            delegate?.controller(self, didChange: anObject, at: indexPath, for: type, newIndexPath: newIndexPath)
            objectChanges.append(
                .init(
                    type: type, indexPath: indexPath, newIndexPath: newIndexPath, id: object.id, object: entry?.object))
        }
        let snapshot = FetchedResultsSnapshot(layout: layout)
        delegate?.controllerDidChangeContent(self)
        delegate?.controller(self, didChangeContentWith: snapshot)
        let changeSet = FetchedResultsChangeSet<Object>(
            seq: change.seq, transaction: change.transaction,
            transactions: change.transactions.flatMap { span in
                span.count == 2 && span[0] <= span[1] ? span[0]...span[1] : nil
            } ?? change.transaction...change.transaction,
            isReload: false, sectionChanges: sectionChanges,
            objectChanges: objectChanges,
            snapshot: snapshot)
        if isCurrent { changeBroadcaster.yield(changeSet) }
    }

    /// Rebuilds the results from the daemon (a snapshot of the same subscription,
    /// or a new subscription when that is gone), reloads the objects that were
    /// loaded, and reports a reload. A new session (`resubscribe`) resumes instead where
    /// history allows (``catchUp()``): one ordinary change.
    func resync(resubscribe: Bool) async {
        let (oldSubscription, waiting) = state.withLock { ($0.subscription, $0.subscribesOnReconnect) }
        guard oldSubscription != nil || waiting else { return }
        // Stored results shown while the daemon was away, or live results whose session was lost
        // (a daemon restart, a dropped link): resume from them when history allows.
        let catchesUp = (oldSubscription == nil && waiting) || resubscribe
        if catchesUp, await catchUpOnReconnect() { return }
        var fetched: Fetched?
        if !resubscribe, let oldSubscription,
            let snapshot = try? await connection.call(ResultsSnapshot.self, .init(subscription: oldSubscription)),
            let layout = try? ResultsLayout(snapshot: snapshot)
        {
            fetched = Fetched(
                subscription: oldSubscription, layout: layout, transaction: snapshot.transaction, entries: [:])
        }
        if fetched == nil {
            var delay = Duration.milliseconds(100)
            for _ in 0..<6 {
                if let result = try? await subscribe() {
                    fetched = result
                    break
                }
                try? await Task.sleep(for: delay)
                delay *= 2
            }
        }
        guard var fetched, !Task.isCancelled else { return }
        // Values may have changed in the gap: reload the objects that had been loaded and are still there.
        let stillThere = Set(fetched.layout.ids)
        let touched = state.withLock { state in
            state.entries.keys.filter { stillThere.contains($0) && fetched.entries[$0] == nil }
        }
        // A group is read with its subscription only (store/get reads objects).
        if !touched.isEmpty, !fetchRequest.isGrouped,
            let loaded = try? await connection.call(
                StoreGet.self, .init(ids: touched, properties: fetchRequest.properties))
        {
            for json in loaded.objects where !json.isNull {
                if let raw = try? DepotObject(json: json) {
                    fetched.entries[raw.id] = Entry(raw: raw, object: try? Object.make(from: raw))
                }
            }
        }
        let result = fetched
        if catchesUp { recordResync(result) }
        await reload(result, replacing: oldSubscription)
        persistBehind()
    }

    /// `results/didInvalidate {reason: "model"}`: a migration ended the subscription, its request
    /// naming a key the migration renamed or removed. Subscribing again reloads the results where
    /// the request still holds, as for the other reasons; where the daemon refuses it, trying again
    /// cannot help: the controller ends (``end``) and tells its delegate why.
    private func resubscribeAfterMigration(_ invalidation: ResultsDidInvalidate.Parameters) async {
        let old = state.withLock { $0.subscription }
        do throws(DepotClientError) {
            let fetched = try await subscribe()
            guard !Task.isCancelled else { return }
            await reload(fetched, replacing: old)
            persistBehind()
        } catch  where error.leftTheDaemonUnreached {
            // The link, not the request: the usual resync tries again.
            await resync(resubscribe: false)
        } catch {
            await end(FetchedResultsEnd(reason: invalidation.reason, error: error), replacing: old)
        }
    }

    /// Stops following the store (``end``) and tells the delegate, unless a new subscription replaced `old`.
    @MainActor
    private func end(_ end: FetchedResultsEnd, replacing old: String?) {
        let isCurrent = state.withLock { state -> Bool in
            guard state.subscription == old else { return false }
            state.subscription = nil
            state.end = end
            return true
        }
        if isCurrent { delegate?.controller(self, didEnd: end) }
    }

    /// ``catchUp()`` on a new session, tried again with backoff while the daemon that just came
    /// back does not answer yet; `false` when it cannot catch up (then resync in full).
    private func catchUpOnReconnect() async -> Bool {
        var delay = Duration.milliseconds(100)
        for _ in 0..<4 {
            do throws(DepotClientError) {
                return try await catchUp()
            } catch  where error.leftTheDaemonUnreached {
                try? await Task.sleep(for: delay)
                delay *= 2
            } catch {
                return false
            }
            if Task.isCancelled { return false }
        }
        return false
    }

    @MainActor
    private func reload(_ fetched: Fetched, replacing oldSubscription: String?) {
        let isCurrent = state.withLock { state -> Bool in
            guard state.subscription == oldSubscription else { return false }
            state.subscribesOnReconnect = false
            state.subscription = fetched.subscription
            state.layout = fetched.layout
            state.transaction = fetched.transaction
            state.entries = fetched.entries
            state.related = fetched.related
            state.replicaWrites.all = true
            state.indexPaths = nil
            return true
        }
        announceReload(layout: fetched.layout, transaction: fetched.transaction, toChangeStreams: isCurrent)
    }

    /// Tells the delegate and (unless `toChangeStreams` is false) the change streams that the
    /// results were replaced by `layout`, reflecting `transaction`.
    @MainActor
    func announceReload(layout: ResultsLayout, transaction: Int64, toChangeStreams: Bool = true) {
        let delegate = self.delegate
        let snapshot = FetchedResultsSnapshot(layout: layout)
        delegate?.controllerDidReloadContent(self)
        delegate?.controller(self, didChangeContentWith: snapshot)
        let changeSet = FetchedResultsChangeSet<Object>(
            seq: layout.seq, transaction: transaction, transactions: nil, isReload: true,
            sectionChanges: [],
            objectChanges: [], snapshot: snapshot)
        if toChangeStreams { changeBroadcaster.yield(changeSet) }
    }

    // MARK: Faulting

    static func store(_ raw: DepotObject, in state: inout State, onlyIfNewer: Bool) {
        if let existing = state.entries[raw.id] {
            if let old = existing.raw.version, let new = raw.version, old > new { return }
            if onlyIfNewer && (existing.raw.version == nil || raw.version == nil || existing.raw.version == raw.version)
            {
                return
            }
        }
        state.entries[raw.id] = Entry(raw: raw, object: try? Object.make(from: raw))
        if state.replica != nil { state.replicaWrites.change(raw.id) }
    }

    /// The ids of the batch (`fetchBatchSize`, at least 256) around `indexPath`.
    func batchIDs(around indexPath: IndexPath) -> [String] {
        state.withLock { state in
            guard let layout = state.layout, indexPath.count == 2, layout.sections.indices.contains(indexPath[0])
            else { return [] }
            let batch = max(state.fetchRequest.fetchBatchSize, 256)
            let ids = layout.sections[indexPath[0]].ids
            let start = min(indexPath[1] / batch * batch, ids.count)
            return Array(ids[start..<min(start + batch, ids.count)])
        }
    }

    /// Loads the batch (`fetchBatchSize` objects, aligned) that holds `indexPath`, blocking.
    func loadBatchBlocking(around indexPath: IndexPath) throws(DepotClientError) {
        guard let (subscription, layout, batch) = batchContext() else { return }
        let start = layout.offset(of: indexPath) / batch * batch
        let page = try connection.callBlocking(
            ResultsObjects.self, .init(subscription: subscription, offset: start, length: batch))
        storePage(page, layout: layout)
        if case .fault = lookup(at: indexPath), let id = layout.id(at: indexPath) {
            try loadBlocking(ids: [id])
        }
    }

    /// Loads objects by id with `store/get`, blocking.
    func loadBlocking(ids: [String]) throws(DepotClientError) {
        let loaded = try connection.callBlocking(StoreGet.self, .init(ids: ids, properties: fetchRequest.properties))
        storeLoaded(loaded.objects)
    }

    /// Loads the objects at `indexPaths` that are not loaded yet, a batch at a
    /// time (`results/objects`), without blocking: prefetch before drawing.
    public func loadObjects(at indexPaths: [IndexPath]) async throws(DepotClientError) {
        let wanted = state.withLock { state in indexPaths.compactMap { state.layout?.id(at: $0) } }
        fillFromPersistentStore(ids: wanted)
        guard let (subscription, layout, batch) = batchContext() else { return }
        let faults = indexPaths.filter { if case .fault = lookup(at: $0) { true } else { false } }
        let starts = Set(faults.map { layout.offset(of: $0) / batch * batch }).sorted()
        for start in starts {
            let page = try await connection.call(
                ResultsObjects.self, .init(subscription: subscription, offset: start, length: batch))
            storePage(page, layout: layout)
        }
        let remaining = faults.compactMap { path -> String? in
            if case .fault = lookup(at: path) { return layout.id(at: path) }
            return nil
        }
        if !remaining.isEmpty {
            let loaded = try await connection.call(
                StoreGet.self, .init(ids: remaining, properties: fetchRequest.properties))
            storeLoaded(loaded.objects)
        }
    }

    private func batchContext() -> (String, ResultsLayout, Int)? {
        state.withLock { state in
            guard let subscription = state.subscription, let layout = state.layout else { return nil }
            return (subscription, layout, max(state.fetchRequest.fetchBatchSize, 1))
        }
    }

    private func storePage(_ page: ResultsObjects.Result, layout: ResultsLayout) {
        state.withLock { state in
            // A page of another seq may hold values newer or older than the layout's: fill faults only.
            let sameSeq = page.seq == state.layout?.seq
            if sameSeq {
                let related = Self.relatedObjects(page.related)
                state.related.merge(related) { _, new in new }
                if state.replica != nil { state.replicaWrites.relate(changed: related.keys, removed: []) }
            }
            for json in page.objects {
                guard let raw = try? Self.row(json, of: state.fetchRequest) else { continue }
                if sameSeq || state.entries[raw.id] == nil { Self.store(raw, in: &state, onlyIfNewer: !sameSeq) }
            }
        }
    }

    private func storeLoaded(_ objects: [JSONValue]) {
        state.withLock { state in
            for json in objects where !json.isNull {
                if let raw = try? Self.row(json, of: state.fetchRequest) {
                    Self.store(raw, in: &state, onlyIfNewer: state.entries[raw.id] != nil)
                }
            }
        }
    }
}

/// A section as the delegate hears of it.
struct SectionDescription: FetchedResultsSectionInfo {
    var name: String
    var indexTitle: String?
    var numberOfObjects: Int
}
