import DepotProtocol
import Foundation

/// An ``ObjectContext`` with a persistent store while the daemon is out of reach (DESIGN.md §9):
/// reads from the file, saves queued in it, replayed in order when the connection returns.
extension ObjectContext {
    /// Why the persistent store could not be written last time; `nil` once a write succeeded.
    public var persistentStoreError: DepotClientError? { state.withLock { $0.persistentStoreError } }

    /// The saves queued in the persistent store and not replayed yet, oldest first (each with its
    /// `saveId` and merge policy); empty without a persistent store.
    public func pendingSaves() throws(DepotClientError) -> [StoreSave.Parameters] {
        try replica?.queue.pending().map(\.params) ?? []
    }

    /// Every replay the daemon refused: first those refused before (kept in the persistent store
    /// until dismissed, so none is missed by a late listener), then each new one. Each call returns
    /// an independent stream; it ends when the context goes away.
    public func failedSaves() -> AsyncStream<FailedSave> {
        let live = failureBroadcaster.stream()
        let stored = (try? replica?.queue.failed()) ?? []
        let seen = Set(stored.map(\.number))
        let (stream, continuation) = AsyncStream.makeStream(of: FailedSave.self, bufferingPolicy: .unbounded)
        for failure in stored { continuation.yield(failure) }
        let forwarder = Task {
            for await failure in live where !seen.contains(failure.number) { continuation.yield(failure) }
            continuation.finish()
        }
        continuation.onTermination = { _ in forwarder.cancel() }
        return stream
    }

    /// Forgets a failed replay (``failedSaves()`` no longer yields it).
    public func dismissFailedSave(_ failure: FailedSave) throws(DepotClientError) {
        try replica?.queue.dismissFailure(failure.number)
    }

    /// Replays the queued saves now, in order, if the connection has a session (it does so by
    /// itself each time a session opens); returns when the queue is empty or the daemon is out of
    /// reach again. Concurrent callers share one replay.
    public func replayPendingSaves() async {
        let task = state.withLock { state -> Task<Void, Never> in
            if let running = state.replay { return running }
            let task = Task { await self.replay() }
            state.replay = task
            return task
        }
        await task.value
    }

    // MARK: Queueing

    /// Replays each time the connection opens a session (at once when it has one).
    func startReplaying() {
        let states = connection.connectionStates()
        let replayer = Task { [weak self] in
            for await linkState in states where linkState == .connected {
                guard let self else { break }
                await self.replayPendingSaves()
            }
        }
        state.withLock { $0.replayer = replayer }
    }

    /// Whether a save must be queued rather than sent: there is no session, or saves queued
    /// before it are still waiting (they go first; a replay is tried first when connected).
    func mustQueue() async -> Bool {
        guard let replica else { return false }
        guard connection.state == .connected else { return true }
        guard (try? replica.queue.pending().isEmpty) == false else { return false }
        await replayPendingSaves()
        return connection.state != .connected || (try? replica.queue.pending().isEmpty) != true
    }

    /// Queues `params` in the persistent store, durably, then shows its changes in the context as
    /// if saved (inserted objects keep their temporary ids until the replay).
    func queue(_ params: StoreSave.Parameters, insertedIDs: [String]) throws(DepotClientError) -> SaveResult {
        guard let replica else { throw .persistentStore("no persistent store to queue the save in") }
        let deletedIDs = params.deleted.map(\.id)
        let objects = state.withLock { state -> [DepotObject] in
            insertedIDs.compactMap { state.inserted[$0] }
                + params.updated.compactMap { state.registered[$0.id].map(Self.current) }
        }
        try replica.queue.enqueue(params, objects: objects, removing: deletedIDs)
        state.withLock { state in
            for id in deletedIDs {
                state.registered[id] = nil
                state.deleted.remove(id)
            }
            for tempID in insertedIDs {
                guard let object = state.inserted.removeValue(forKey: tempID) else { continue }
                state.registered[tempID] = Registered(base: object)
            }
            state.insertionOrder.removeAll { insertedIDs.contains($0) }
            for update in params.updated {
                guard let registered = state.registered[update.id] else { continue }
                state.registered[update.id] = Registered(base: Self.current(registered))
            }
        }
        return SaveResult(ids: [:], transaction: 0, saveId: params.saveId, isPending: true)
    }

    // MARK: Replaying

    private func replay() async {
        defer { state.withLock { $0.replay = nil } }
        guard let replica else { return }
        let outcome = await replica.queue.replay(on: connection) { params, result in
            adopt(result, of: params)
        } refused: { failure in
            failureBroadcaster.yield(failure)
        }
        if let write = outcome.lastWrite {
            state.withLock { state in
                if case .failure(let error) = write {
                    state.persistentStoreError = error
                } else {
                    state.persistentStoreError = nil
                }
            }
        }
        switch outcome.end {
        case .nothingQueued, .stopped: return
        case .retryLater:
            retryLater()
            return
        case .replayed: break
        }
        // The context shows what the store kept: objects whose insert was refused go, the rest are re-read.
        let refused = state.withLock { state in
            let refused = state.registered.keys.filter {
                $0.hasPrefix("temp-") && state.permanentIDs[$0] == nil && !outcome.stillQueued.contains($0)
            }
            for id in refused { state.registered[id] = nil }
            return refused
        }
        persistObjects(ids: [], removing: refused)
        try? await refreshAllObjects()
        await storeReplayed(outcome.touched, in: replica)
    }

    /// Writes to the file the store's copies of what replayed saves touched, and drops their
    /// temporary ids: a context that never fetched them (a later process replaying an earlier
    /// one's queue) has no copy of its own to persist, so the file would otherwise keep an insert
    /// under its temporary id beside its permanent one, and updates (refused ones too) with the
    /// values and versions queued rather than kept.
    private func storeReplayed(_ touched: ReplayedObjects, in replica: ContextReplicaFile) async {
        let ids = touched.ids.sorted()
        guard !ids.isEmpty || !touched.temporary.isEmpty else { return }
        var objects: [DepotObject] = []
        var gone: [String] = []
        if !ids.isEmpty {
            guard let fetched = try? await connection.call(StoreGet.self, .init(ids: ids)).objects else { return }
            for (id, json) in zip(ids, fetched) {
                if let object = try? DepotObject(json: json) { objects.append(object) } else { gone.append(id) }
            }
        }
        record { () throws(DepotClientError) in
            try replica.store(objects, removing: gone + touched.temporary.sorted())
        }
    }

    /// Replays again in a second (after a transient error, the session still open).
    private func retryLater() {
        Task { [weak self] in
            try? await Task.sleep(for: .seconds(1))
            guard let self, self.connection.state == .connected else { return }
            await self.replayPendingSaves()
        }
    }

    /// Moves the objects a replayed save inserted to their permanent ids, with the new versions.
    private func adopt(_ result: StoreSave.Result, of params: StoreSave.Parameters) {
        var moved: [String] = []
        state.withLock { state in
            for (tempID, id) in result.ids {
                state.permanentIDs[tempID] = id
                guard var registered = state.registered.removeValue(forKey: tempID) else { continue }
                registered.base.id = id
                registered.base.version = result.versions[id]
                state.registered[id] = registered
                moved.append(tempID)
            }
            for update in params.updated {
                guard let version = result.versions[update.id],
                    state.registered[update.id]?.base.version == update.version
                else { continue }
                state.registered[update.id]?.base.version = version
            }
        }
        persistObjects(ids: Array(result.ids.values) + params.updated.map(\.id), removing: moved)
    }

    // MARK: The file

    /// Writes the context's copies of `ids` (as the store has them, queued saves applied) to the
    /// persistent store, and forgets `removed`; a failure is kept in ``persistentStoreError``.
    func persistObjects(ids: [String], removing removed: [String] = []) {
        guard let replica else { return }
        let objects = state.withLock { state in ids.compactMap { state.registered[$0]?.base } }
        record { () throws(DepotClientError) in try replica.store(objects, removing: removed) }
    }

    /// Runs a write to the persistent store, keeping its failure in ``persistentStoreError``;
    /// returns whether it succeeded.
    @discardableResult
    private func record(_ write: () throws(DepotClientError) -> Void) -> Bool {
        do {
            try write()
            state.withLock { $0.persistentStoreError = nil }
            return true
        } catch {
            state.withLock { $0.persistentStoreError = error }
            return false
        }
    }

    // MARK: Reading offline

    /// `request` answered from the persistent store when there is one and no session: the stored
    /// objects of its entity that match its predicate, in its order, within its window (not
    /// registered). `nil` when the daemon should answer.
    ///
    /// - Throws: ``DepotClientError/persistentStore(_:)`` for a grouped request (its groups are the
    ///   daemon's to compute), or a predicate with no model stored yet to evaluate it.
    func offlineMatches(_ request: FetchRequest) async throws(DepotClientError) -> [DepotObject]? {
        guard let replica else { return nil }
        guard connection.state != .connected else {
            try await storeModelOnce(in: replica)
            return nil
        }
        guard !request.isGrouped else {
            throw .persistentStore(
                "a grouped fetch (propertiesToGroupBy, aggregates, havingPredicate) is not answered from the persistent store while the daemon is out of reach"
            )
        }
        var objects = try replica.objects(ofEntity: request.entity)
        if let predicate = request.predicate {
            guard let model = try replica.model() else {
                throw .persistentStore(
                    "the persistent store has no model yet to evaluate '\(predicate)' while the daemon is out of reach")
            }
            let byID = Dictionary(objects.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            let evaluator = PredicateEvaluator(
                model: model, object: { id in (byID[id] ?? (try? replica.object(withID: id)) ?? nil)?.wireObject },
                toMany: { owner, key in
                    (owner[key]?.arrayValue ?? []).compactMap { $0.stringValue }.compactMap { id in
                        (byID[id] ?? (try? replica.object(withID: id)) ?? nil)?.wireObject
                    }
                })
            do throws(RPCError) {
                let node = try PredicateParser.parse(predicate, arguments: request.arguments)
                var matching: [DepotObject] = []
                for object in objects where try evaluator.evaluate(node, on: object.wireObject, entity: request.entity)
                {
                    matching.append(object)
                }
                objects = matching
            } catch {
                throw .server(error)
            }
        }
        let sort = request.sort ?? []
        objects.sort { left, right in
            for descriptor in sort {
                let order = Self.compare(left.value(forKey: descriptor.key), right.value(forKey: descriptor.key))
                if order != 0 { return descriptor.ascending ? order < 0 : order > 0 }
            }
            return left.id < right.id
        }
        let offset = min(request.offset ?? 0, objects.count)
        let end = request.limit.map { min(offset + $0, objects.count) } ?? objects.count
        return Array(objects[offset..<end])
    }

    /// ``offlineMatches(_:)`` as the plain dictionaries `store/fetch` answers for `resultType:
    /// dictionaries`: each object's `properties` (all its values without them), no id.
    func offlineDictionaries(_ request: FetchRequest) async throws(DepotClientError) -> [[String: JSONValue]]? {
        guard let objects = try await offlineMatches(request) else { return nil }
        return objects.map { object in
            guard let properties = request.properties else { return object.values }
            var dictionary: [String: JSONValue] = [:]
            for key in properties { dictionary[key] = object.values[key] ?? .null }
            return dictionary
        }
    }

    /// Keeps the daemon's model in the persistent store (once per context), for offline predicates.
    private func storeModelOnce(in replica: ContextReplicaFile) async throws(DepotClientError) {
        guard
            state.withLock({ state in
                defer { state.modelStored = true }
                return !state.modelStored
            })
        else { return }
        let model = try await connection.call(ModelGet.self, Empty())
        record { () throws(DepotClientError) in try replica.storeModel(model.entities, version: model.version) }
    }

    /// SQLite's order of two values: null (or missing) first, then numbers, then text (bytewise).
    static func compare(_ left: JSONValue?, _ right: JSONValue?) -> Int {
        func rank(_ value: JSONValue?) -> Int {
            switch value {
            case nil, .null: 0
            case .bool, .int, .double: 1
            default: 2
            }
        }
        func number(_ value: JSONValue?) -> Double {
            switch value {
            case .bool(let flag): flag ? 1 : 0
            case .int(let integer): Double(integer)
            case .double(let double): double
            default: 0
            }
        }
        let (leftRank, rightRank) = (rank(left), rank(right))
        if leftRank != rightRank { return leftRank < rightRank ? -1 : 1 }
        switch leftRank {
        case 0: return 0
        case 1:
            let (a, b) = (number(left), number(right))
            return a < b ? -1 : (a == b ? 0 : 1)
        default:
            let a = Array((left?.stringValue ?? "\(left!)").utf8)
            let b = Array((right?.stringValue ?? "\(right!)").utf8)
            return a.lexicographicallyPrecedes(b) ? -1 : (a == b ? 0 : 1)
        }
    }
}

extension DepotObject {
    /// The object as the predicate evaluator reads it: its values with its `id`.
    fileprivate var wireObject: [String: JSONValue] {
        var object = values
        object["id"] = .string(id)
        return object
    }
}
