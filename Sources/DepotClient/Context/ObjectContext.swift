import DepotProtocol
import Foundation
import Synchronization

/// A unit of work, like `NSManagedObjectContext`: fetch objects into it,
/// insert, change and delete them locally, then ``save(mergePolicy:)`` them
/// in one atomic `store/save` (with each object's `version` and the `original`
/// values of the keys it changed, so the daemon detects conflicts).
///
/// ```swift
/// let context = ObjectContext(connection: connection)
/// let brazil = try await context.fetch(FetchRequest(entity: "Team", predicate: "teamName == 'Brazil'"))[0]
/// context.set(6, forKey: "wins", on: brazil)
/// let team = context.insert(entity: "Team", values: ["teamName": "Atlantis", "qualifyingZone": "Ocean"])
/// try await context.save(mergePolicy: .objectTrump)
/// ```
///
/// With ``setAutomaticallyMergesChangesFromStore(_:)`` on, it observes
/// `store/didSave` and refreshes its registered objects when another process
/// saves them (pending local changes are kept on top), also across a daemon restart.
///
/// All members are safe to call from any task; objects are values, so the
/// context's copy is the truth (read it back with ``registeredObject(withID:)``).
public final class ObjectContext: Sendable {
    struct Registered {
        /// The object as the store last had it.
        var base: DepotObject
        /// Local changes not saved yet, by key.
        var changes: [String: JSONValue] = [:]
        /// Additions and removals on to-many relationships not saved yet, by key
        /// (a key set whole is in ``changes`` instead).
        var memberChanges: [String: MemberChange] = [:]

        var hasChanges: Bool { !changes.isEmpty || !memberChanges.isEmpty }
    }

    struct State {
        var registered: [String: Registered] = [:]
        var inserted: [String: DepotObject] = [:]
        var insertionOrder: [String] = []
        var deleted: Set<String> = []
        var observer: String?
        var merging: Bool = false
        var listener: Task<Void, Never>?
        /// The permanent id of each object inserted and saved, by its temporary id: a copy
        /// of the object made before the save still changes the right object.
        var permanentIDs: [String: String] = [:]
        /// Replays queued saves each time the connection is up (with a persistent store).
        var replayer: Task<Void, Never>?
        /// The replay running now, which later callers wait for.
        var replay: Task<Void, Never>?
        /// Why the persistent store could not be written last time, if it could not.
        var persistentStoreError: DepotClientError?
        /// Whether the daemon's model was written to the persistent store (for offline predicates).
        var modelStored = false
    }

    /// The connection the context saves through.
    public let connection: DepotConnection
    /// The policy ``save(mergePolicy:)`` uses when given none.
    public let mergePolicy: MergePolicy
    /// Recorded as `author` in history and `store/didSave`.
    public let author: String?
    /// The local SQLite file the context keeps its objects and queued saves in, if any.
    public let persistentStore: URL?
    let replica: ContextReplicaFile?
    let state = Mutex(State())
    private let changeBroadcaster = Broadcaster<ObjectsDidChange>()
    /// What ``failedSaves()`` streams.
    let failureBroadcaster = Broadcaster<FailedSave>()

    /// Creates an empty context.
    public init(connection: DepotConnection, mergePolicy: MergePolicy = .error, author: String? = nil) {
        self.connection = connection
        self.mergePolicy = mergePolicy
        self.author = author
        self.persistentStore = nil
        self.replica = nil
    }

    /// Creates an empty context that keeps what it reads and saves in the local SQLite file
    /// `persistentStore` (DESIGN.md §9), so that it keeps working with the daemon out of reach:
    ///
    /// - Reads (``object(withID:)``, ``fetch(_:)``) are served from the file while there is no session.
    /// - ``save(mergePolicy:)`` with no session (or when the link drops under it) writes the change
    ///   to the file, durably, marks it pending, and returns a ``SaveResult`` with `isPending`.
    /// - Each time the connection opens a session, the pending saves replay in order, each with
    ///   its own `saveId` (applied at most once, however often it is resent) and merge policy; later
    ///   saves are rewritten with the permanent ids and versions earlier ones produced.
    /// - A replay the daemon refuses comes out of ``failedSaves()`` with the error and the change
    ///   (and stays in the file until ``dismissFailedSave(_:)``); nothing is dropped.
    /// - A context opened later on the same file (after the process was killed, say) finds the
    ///   pending saves and replays them.
    ///
    /// - Throws: ``DepotClientError/persistentStore(_:)`` when the file cannot be opened.
    public init(
        connection: DepotConnection, mergePolicy: MergePolicy = .error, author: String? = nil, persistentStore: URL
    ) throws(DepotClientError) {
        self.connection = connection
        self.mergePolicy = mergePolicy
        self.author = author
        self.persistentStore = persistentStore
        self.replica = try ContextReplicaFile(url: persistentStore)
        startReplaying()
    }

    deinit {
        let (listener, observer, replayer) = state.withLock { ($0.listener, $0.observer, $0.replayer) }
        listener?.cancel()
        replayer?.cancel()
        if let observer {
            let connection = connection
            Task { _ = try? await connection.call(StoreUnobserve.self, .init(observer: observer)) }
        }
    }

    // MARK: Reading

    /// Fetches objects and registers them; objects with local changes keep them.
    /// With a persistent store and no session, the objects stored in the file are matched
    /// locally (predicate, order, window); a `resultType` other than objects is then refused
    /// (``count(for:)`` and ``fetchDictionaries(_:)`` answer those).
    public func fetch(_ request: FetchRequest) async throws(DepotClientError) -> [DepotObject] {
        if let offline = try await offlineMatches(request) {
            guard request.resultType == nil || request.resultType == .objects else {
                throw .persistentStore(
                    "fetch(_:) answers only objects from the persistent store while the daemon is out of reach: count(for:) and fetchDictionaries(_:) answer the other result types"
                )
            }
            return register(offline).map { $0.bound(to: self) }
        }
        let result = try await connection.call(StoreFetch.self, request)
        var objects: [DepotObject] = []
        for json in result.objects ?? [] { objects.append(try DepotObject(json: json)) }
        // Prefetched objects are registered too: following a relationship to them needs no round trip.
        var related: [DepotObject] = []
        for json in (result.related ?? [:]).values { related.append(try DepotObject(json: json)) }
        if !related.isEmpty { _ = register(related) }
        return register(objects).map { $0.bound(to: self) }
    }

    /// The plain dictionaries `request` answers, like a Core Data fetch with
    /// `.dictionaryResultType`: the `properties` of each object, or, for a grouped
    /// request (``FetchRequest/propertiesToGroupBy``, ``FetchRequest/aggregates``,
    /// ``FetchRequest/havingPredicate``), one dictionary per group. Nothing is registered.
    /// With a persistent store and no session, a request that is not grouped is answered from
    /// the objects stored in the file; a grouped one fails with
    /// ``DepotClientError/persistentStore(_:)``.
    public func fetchDictionaries(_ request: FetchRequest) async throws(DepotClientError) -> [[String: JSONValue]] {
        var request = request
        request.resultType = .dictionaries
        if let offline = try await offlineDictionaries(request) { return offline }
        let result = try await connection.call(StoreFetch.self, request)
        var dictionaries: [[String: JSONValue]] = []
        for element in result.objects ?? [] {
            guard let dictionary = element.objectValue else {
                throw .invalidResponse("a dictionary result is not an object: \(element)")
            }
            dictionaries.append(dictionary)
        }
        return dictionaries
    }

    /// The object with `id`, from the context or else from the store; `nil` when it does not exist.
    public func object(withID id: String) async throws(DepotClientError) -> DepotObject? {
        if let known = registeredObject(withID: id) { return known }
        if let replica, connection.state != .connected {
            return try replica.object(withID: id).flatMap { register([$0]).first?.bound(to: self) }
        }
        let result = try await connection.call(StoreGet.self, .init(ids: [id]))
        guard let json = result.objects.first, !json.isNull else { return nil }
        return register([try DepotObject(json: json)]).first?.bound(to: self)
    }

    /// The context's current version of the object with `id` (local changes
    /// applied), or `nil` when the context does not hold it or it is deleted.
    public func registeredObject(withID id: String) -> DepotObject? {
        state.withLock { state -> DepotObject? in
            if let inserted = state.inserted[id] { return inserted }
            guard !state.deleted.contains(id), let registered = state.registered[id] else { return nil }
            return Self.current(registered)
        }?.bound(to: self)
    }

    /// Every object the context holds (fetched or inserted, not deleted), with local changes applied.
    public var registeredObjects: [DepotObject] {
        state.withLock { state in
            state.registered.values.filter { !state.deleted.contains($0.base.id) }.map(Self.current)
                + state.insertionOrder.compactMap { state.inserted[$0] }
        }.map { $0.bound(to: self) }
    }

    /// Objects inserted since the last save.
    public var insertedObjects: [DepotObject] {
        state.withLock { state in state.insertionOrder.compactMap { state.inserted[$0] } }.map { $0.bound(to: self) }
    }
    /// Registered objects with unsaved changes.
    public var updatedObjects: [DepotObject] {
        state.withLock { state in
            state.registered.values.filter { $0.hasChanges && !state.deleted.contains($0.base.id) }.map(
                Self.current)
        }.map { $0.bound(to: self) }
    }
    /// Objects deleted since the last save.
    public var deletedObjects: [DepotObject] {
        state.withLock { state in state.deleted.compactMap { state.registered[$0]?.base } }.map { $0.bound(to: self) }
    }

    /// Whether there is anything to save.
    public var hasChanges: Bool {
        state.withLock { state in
            !state.inserted.isEmpty || !state.deleted.isEmpty
                || state.registered.values.contains(where: \.hasChanges)
        }
    }

    // MARK: Changing

    /// Inserts a new object; it has a temporary id until ``save(mergePolicy:)``
    /// (other objects' relationship values may name it).
    @discardableResult
    public func insert(entity: String, values: [String: JSONValue] = [:]) -> DepotObject {
        let object = DepotObject(id: "temp-\(UUID().uuidString)", entity: entity, values: values)
        state.withLock { state in
            state.inserted[object.id] = object
            state.insertionOrder.append(object.id)
        }
        return object.bound(to: self)
    }

    /// Inserts a new object of `entityName`, like Core Data's
    /// `NSEntityDescription.insertNewObject(forEntityName:into:)`; set its values
    /// through it (`team["teamName"] = "Atlantis"`), then save.
    public func insertNewObject(forEntityName entityName: String) -> DepotObject {
        insert(entity: entityName)
    }

    /// The object with `id`, like `NSManagedObjectContext.object(with:)`; unlike
    /// Core Data's it reads the store at once (a round trip) and is `nil` when
    /// the object does not exist.
    public func object(with id: String) async throws(DepotClientError) -> DepotObject? {
        try await object(withID: id)
    }

    /// Fetches objects as `T` (your `Decodable` type), registering them in the context.
    public func fetch<T: Decodable & Sendable>(_ request: FetchRequest, as type: T.Type) async throws(DepotClientError)
        -> [T]
    {
        var results: [T] = []
        for object in try await fetch(request) {
            do {
                results.append(try T.make(from: object))
            } catch {
                throw .invalidResponse("\(object.id) cannot be made into \(T.self): \(error)")
            }
        }
        return results
    }

    /// The number of objects `request` matches, like `NSManagedObjectContext.count(for:)`
    /// (within its limit and offset). With a persistent store and no session, the objects stored
    /// in the file are counted; a grouped request then fails with ``DepotClientError/persistentStore(_:)``.
    public func count(for request: FetchRequest) async throws(DepotClientError) -> Int {
        var request = request
        request.resultType = .count
        if let offline = try await offlineMatches(request) { return offline.count }
        return try await connection.call(StoreFetch.self, request).count ?? 0
    }

    /// Sets `value` for `key` on `object` (a registered or inserted object).
    /// Assigning through an object the context handed out does the same.
    public func set(_ value: JSONValue, forKey key: String, on object: DepotObject) {
        state.withLock { state in
            let object = Self.saved(object, in: state)
            if state.inserted[object.id] != nil {
                state.inserted[object.id]?.storage[key] = value
            } else {
                if state.registered[object.id] == nil { state.registered[object.id] = Registered(base: object.unbound) }
                state.registered[object.id]?.changes[key] = value
                state.registered[object.id]?.memberChanges[key] = nil
            }
        }
    }

    /// Records additions to and removals from the to-many relationship `key` of
    /// `object`: on a set changed whole (or an inserted object) they change that
    /// set; otherwise the save sends them as `{"add", "remove"}`.
    func changeMembers(_ change: MemberChange, forKey key: String, on object: DepotObject) {
        state.withLock { state in
            let object = Self.saved(object, in: state)
            if state.inserted[object.id] != nil {
                let members = state.inserted[object.id]?.storage[key]?.arrayValue ?? []
                state.inserted[object.id]?.storage[key] = .array(change.applied(to: members))
                return
            }
            var registered = state.registered[object.id] ?? Registered(base: object.unbound)
            if let members = registered.changes[key]?.arrayValue {
                registered.changes[key] = .array(change.applied(to: members))
            } else {
                registered.memberChanges[key, default: MemberChange()].merge(change)
            }
            state.registered[object.id] = registered
        }
    }

    /// Records every value of `object` that differs from the context's copy:
    /// change a ``DepotObject`` value as you like, then hand it back here.
    ///
    /// A to-many value in the `{"add", "remove"}` shape (what
    /// ``DepotObject/addObjectIDs(_:forKey:)`` leaves on an object that belongs
    /// to no context) is recorded as additions and removals.
    public func update(_ object: DepotObject) {
        state.withLock { state in
            var object = Self.saved(object, in: state)
            var memberChanges: [String: MemberChange] = [:]
            for (key, value) in object.storage {
                guard let change = MemberChange(wire: value) else { continue }
                memberChanges[key] = change
                object.storage[key] = nil
            }
            if state.inserted[object.id] != nil {
                for (key, change) in memberChanges { object.storage[key] = .array(change.applied(to: [])) }
                state.inserted[object.id]?.storage = object.storage
                return
            }
            var registered = state.registered[object.id] ?? Registered(base: object.unbound)
            for (key, value) in object.values where Self.current(registered).values[key] != value {
                registered.changes[key] = value
            }
            for (key, change) in memberChanges {
                if let members = registered.changes[key]?.arrayValue {
                    registered.changes[key] = .array(change.applied(to: members))
                } else {
                    registered.memberChanges[key, default: MemberChange()].merge(change)
                }
            }
            state.registered[object.id] = registered
        }
    }

    /// Deletes `object` at the next save (an inserted one is simply dropped).
    public func delete(_ object: DepotObject) {
        state.withLock { state in
            let object = Self.saved(object, in: state)
            if state.inserted.removeValue(forKey: object.id) != nil {
                state.insertionOrder.removeAll { $0 == object.id }
                return
            }
            if state.registered[object.id] == nil { state.registered[object.id] = Registered(base: object.unbound) }
            state.deleted.insert(object.id)
        }
    }

    /// Forgets every unsaved change: inserts, changes and deletes.
    public func rollback() {
        state.withLock { state in
            state.inserted.removeAll()
            state.insertionOrder.removeAll()
            state.deleted.removeAll()
            for id in state.registered.keys {
                state.registered[id]?.changes.removeAll()
                state.registered[id]?.memberChanges.removeAll()
            }
        }
    }

    /// Forgets every object (unsaved changes included).
    public func reset() {
        state.withLock { state in
            state.registered.removeAll()
            state.inserted.removeAll()
            state.insertionOrder.removeAll()
            state.deleted.removeAll()
        }
    }

    // MARK: Saving

    /// What a save committed: the permanent ids of inserted objects (by temporary id) and the transaction.
    public struct SaveResult: Sendable, Hashable {
        /// The permanent id of each inserted object, by its temporary id.
        public var ids: [String: String]
        /// The transaction's number; 0 when there was nothing to save.
        public var transaction: Int64
        /// The `saveId` the save was sent with (a fresh UUID each save); `nil` when there was
        /// nothing to save. Resending `store/save` with it returns this answer without applying it again.
        public var saveId: String? = nil
        /// Whether the save was queued in the persistent store, the daemon being out of reach: it
        /// replays when the connection returns (then ``ids`` is empty and ``transaction`` 0).
        public var isPending = false
    }

    /// Saves every change in one atomic `store/save`. Each update carries the
    /// version it was based on and the original values of the keys it changed;
    /// `mergePolicy` (the context's when `nil`) decides conflicts as Core Data's
    /// merge policies do. Afterwards the saved objects are re-read, so the
    /// context shows what the store kept (under `storeTrump` or `rollback` that
    /// can differ from what was sent).
    ///
    /// Each save carries a fresh `saveId` (DESIGN.md §6). When the connection
    /// drops while the save is in flight, so that whether it committed is
    /// unknown, the same save is sent once more with the same `saveId` once
    /// the connection is back: the daemon applies it at most once, and answers
    /// with the first answer if it had committed.
    ///
    /// - Throws: -32012 with `data.conflicts` under `.error`, -32010 / -32011 for
    ///   validation and uniqueness; the context's changes are then kept.
    @discardableResult
    public func save(mergePolicy: MergePolicy? = nil) async throws(DepotClientError) -> SaveResult {
        let (params, insertedIDs) = state.withLock { state -> (StoreSave.Parameters, [String]) in
            let inserted = state.insertionOrder.compactMap { state.inserted[$0] }.map {
                InsertedObject(entity: $0.entity, tempId: $0.id, values: $0.values)
            }
            let updated = state.registered.values.filter { $0.hasChanges && !state.deleted.contains($0.base.id) }
                .sorted { $0.base.id < $1.base.id }
                .map { registered in
                    // Additions and removals apply as of the commit: they need no original.
                    UpdatedObject(
                        id: registered.base.id, version: registered.base.version,
                        original: registered.changes.keys.reduce(into: [:]) {
                            $0[$1] = registered.base.values[$1] ?? .null
                        },
                        values: registered.changes.merging(
                            registered.memberChanges.filter { !$0.value.isEmpty }.mapValues(\.wire)
                        ) { whole, _ in whole })
                }
            let deleted = state.deleted.sorted().map {
                DeletedObject(id: $0, version: state.registered[$0]?.base.version)
            }
            return (
                StoreSave.Parameters(
                    inserted: inserted, updated: updated, deleted: deleted,
                    mergePolicy: mergePolicy ?? self.mergePolicy, author: author, saveId: UUID().uuidString),
                state.insertionOrder
            )
        }
        guard !params.inserted.isEmpty || !params.updated.isEmpty || !params.deleted.isEmpty else {
            return SaveResult(ids: [:], transaction: 0)
        }
        if replica != nil, await mustQueue() { return try queue(params, insertedIDs: insertedIDs) }
        let result: StoreSave.Result
        do throws(DepotClientError) {
            result = try await connection.call(StoreSave.self, params)
        } catch  where replica != nil && error.leftTheDaemonUnreached {
            // It may have committed: the replay resends it with the same saveId, applied at most once.
            return try queue(params, insertedIDs: insertedIDs)
        } catch .connectionLost {
            // It may have committed: the same saveId makes the resend apply it at most once.
            result = try await connection.call(StoreSave.self, params)
        }
        let saved = params.updated.map(\.id) + insertedIDs.compactMap { result.ids[$0] }
        var fresh = saved.isEmpty ? [] : (try? await connection.call(StoreGet.self, .init(ids: saved)).objects) ?? []
        fresh = await withRelationshipSets(fresh, params: params, ids: result.ids)
        state.withLock { state in
            for id in params.deleted.map(\.id) { state.registered[id] = nil }
            state.deleted.subtract(params.deleted.map(\.id))
            for tempID in insertedIDs {
                guard let object = state.inserted.removeValue(forKey: tempID), let id = result.ids[tempID] else {
                    continue
                }
                state.registered[id] = Registered(
                    base: DepotObject(
                        id: id, entity: object.entity, version: result.versions[id], values: object.values))
            }
            state.insertionOrder.removeAll { insertedIDs.contains($0) }
            for tempID in insertedIDs { state.permanentIDs[tempID] = result.ids[tempID] }
            for update in params.updated {
                guard var registered = state.registered[update.id] else { continue }
                for (key, value) in update.values {
                    if let change = registered.memberChanges[key], value == change.wire {
                        // Sent as additions and removals: the set as the store now has it comes from the re-read.
                        registered.base.values[key] = registered.base.values[key]?.arrayValue.map {
                            .array(change.applied(to: $0))
                        }
                        registered.memberChanges[key] = nil
                    } else {
                        registered.base.values[key] = value
                    }
                }
                registered.base.version = result.versions[update.id] ?? registered.base.version
                // Keep only changes made while the save was in flight.
                registered.changes = registered.changes.filter { update.values[$0.key] != $0.value }
                state.registered[update.id] = registered
            }
            for json in fresh where !json.isNull {
                guard let object = try? DepotObject(json: json) else { continue }
                state.registered[object.id]?.base = object
            }
        }
        persistObjects(ids: saved, removing: params.deleted.map(\.id))
        return SaveResult(ids: result.ids, transaction: result.transaction, saveId: params.saveId)
    }

    /// `fresh` (objects re-read after a save, which carry no to-many relationships)
    /// with the relationships the save set or changed read again, so the context
    /// keeps showing them as the store has them.
    private func withRelationshipSets(_ fresh: [JSONValue], params: StoreSave.Parameters, ids: [String: String]) async
        -> [JSONValue]
    {
        // Keys whose saved value was a list or {add, remove}: to-many relationships (or json lists).
        var keysByEntity: [String: Set<String>] = [:]
        var idsByEntity: [String: Set<String>] = [:]
        func note(_ id: String, _ values: [String: JSONValue]) {
            let keys = values.filter { $0.value.arrayValue != nil || MemberChange(wire: $0.value) != nil }.keys
            guard !keys.isEmpty else { return }
            let entity = DepotObject.entity(ofID: id)
            keysByEntity[entity, default: []].formUnion(keys)
            idsByEntity[entity, default: []].insert(id)
        }
        for update in params.updated { note(update.id, update.values) }
        for insert in params.inserted {
            if let tempID = insert.tempId, let id = ids[tempID] { note(id, insert.values) }
        }
        guard !keysByEntity.isEmpty else { return fresh }
        var extra: [String: [String: JSONValue]] = [:]
        for (entity, keys) in keysByEntity {
            let entityIDs = Array(idsByEntity[entity] ?? [])
            guard
                let objects = try? await connection.call(
                    StoreGet.self, .init(ids: entityIDs, properties: keys.sorted())
                ).objects
            else { continue }
            for (id, json) in zip(entityIDs, objects) {
                extra[id] = json.objectValue?.filter { keys.contains($0.key) }
            }
        }
        return fresh.map { json in
            guard var members = json.objectValue, let id = members["id"]?.stringValue, let more = extra[id] else {
                return json
            }
            members.merge(more) { $1 }
            return .object(members)
        }
    }

    // MARK: Merging other processes' saves

    /// Whether the context refreshes its objects from other processes' saves.
    public var automaticallyMergesChangesFromStore: Bool { state.withLock { $0.merging } }

    /// Turns merging of other processes' saves on or off (like Core Data's
    /// `automaticallyMergesChangesFromParent`, across processes): registers
    /// `store/observe {includeValues: true}` and re-registers it after a reconnect.
    public func setAutomaticallyMergesChangesFromStore(_ on: Bool) async throws(DepotClientError) {
        if !on {
            let (observer, listener) = state.withLock { state in
                defer {
                    state.merging = false
                    state.observer = nil
                    state.listener = nil
                }
                return (state.observer, state.listener)
            }
            listener?.cancel()
            if let observer { _ = try? await connection.call(StoreUnobserve.self, .init(observer: observer)) }
            return
        }
        guard !automaticallyMergesChangesFromStore else { return }
        let inputs = ControllerInputs(connection: connection)
        let observer = try await connection.call(StoreObserve.self, .init(includeValues: true)).observer
        let listener = Task { [weak self] in
            for await input in inputs.stream {
                guard let self else { break }
                await self.handle(input)
            }
            inputs.cancel()
        }
        state.withLock { state in
            state.merging = true
            state.observer = observer
            state.listener = listener
        }
    }

    /// Every merge of other processes' saves from now on. Each call returns an independent stream.
    public func objectsDidChange() -> AsyncStream<ObjectsDidChange> { changeBroadcaster.stream() }

    /// Re-reads every registered object from the store (local changes are kept on top).
    public func refreshAllObjects() async throws(DepotClientError) {
        // Objects inserted by a save still queued have no id in the store yet.
        let ids = state.withLock { $0.registered.keys.filter { !$0.hasPrefix("temp-") } }
        guard !ids.isEmpty else { return }
        let objects = try await connection.call(StoreGet.self, .init(ids: ids)).objects
        var refreshed: [String] = []
        var deleted: [String] = []
        state.withLock { state in
            for (id, json) in zip(ids, objects) {
                if json.isNull {
                    state.registered[id] = nil
                    state.deleted.remove(id)
                    deleted.append(id)
                } else if let object = try? DepotObject(json: json), state.registered[id]?.base != object {
                    state.registered[id]?.base = object
                    refreshed.append(id)
                }
            }
        }
        persistObjects(ids: refreshed, removing: deleted)
        publish(ObjectsDidChange(transaction: nil, refreshed: refreshed, deleted: deleted))
    }

    private func handle(_ input: ControllerInputs.Input) async {
        switch input {
        case .notification(let notification):
            if let ended = notification.decode(ObserveDidEnd.self) {
                endMerging(ended)
                return
            }
            guard let didSave = notification.decode(DidSave.self), didSave.observer == state.withLock({ $0.observer })
            else { return }
            merge(didSave)
        case .connection(.reconnected):
            // The new session has no observer, and saves may have been missed meanwhile.
            if let observer = try? await connection.call(StoreObserve.self, .init(includeValues: true)).observer {
                state.withLock { $0.observer = observer }
            }
            try? await refreshAllObjects()
        case .connection(.disconnected):
            break
        }
    }

    /// The daemon ended the context's observer (`store/observeDidEnd`: its key's
    /// scope could not be evaluated): merging stops, and the change stream says why.
    private func endMerging(_ ended: ObserveDidEnd.Parameters) {
        let listener = state.withLock { state -> Task<Void, Never>? in
            guard state.observer == ended.observer else { return nil }
            defer {
                state.merging = false
                state.observer = nil
                state.listener = nil
            }
            return state.listener
        }
        guard let listener else { return }
        publish(
            ObjectsDidChange(
                transaction: ended.transaction, refreshed: [], deleted: [],
                mergingEnded: "the daemon ended this context's observer (\(ended.reason)): \(ended.message)"))
        listener.cancel()
    }

    private func merge(_ didSave: DidSave.Parameters) {
        var refreshed: [String] = []
        var deleted: [String] = []
        state.withLock { state in
            for changes in didSave.changes.values {
                for id in changes.deleted where state.registered[id] != nil {
                    state.registered[id] = nil
                    state.deleted.remove(id)
                    deleted.append(id)
                }
                for update in changes.updated where state.registered[update.id] != nil {
                    guard let json = didSave.objects?[update.id], let object = try? DepotObject(json: json) else {
                        continue
                    }
                    if let known = state.registered[update.id]?.base.version, let new = object.version, known >= new {
                        continue
                    }
                    state.registered[update.id]?.base = object
                    refreshed.append(update.id)
                }
            }
        }
        if !refreshed.isEmpty || !deleted.isEmpty {
            persistObjects(ids: refreshed, removing: deleted)
            publish(ObjectsDidChange(transaction: didSave.transaction, refreshed: refreshed, deleted: deleted))
        }
    }

    private func publish(_ change: ObjectsDidChange) { changeBroadcaster.yield(change) }

    // MARK: Helpers

    func register(_ objects: [DepotObject]) -> [DepotObject] {
        let registered = state.withLock { state in
            objects.map { object in
                if var registered = state.registered[object.id] {
                    registered.base = Self.keepingUnfetchedKeys(of: registered.base, in: object)
                    state.registered[object.id] = registered
                    return Self.current(registered)
                }
                state.registered[object.id] = Registered(base: object)
                return object
            }
        }
        persistObjects(ids: objects.map(\.id))
        return registered
    }

    /// `fetched`, plus the keys it does not carry (to-many relationships a fetch
    /// without `properties` leaves out) from `known` when both are the same
    /// version: any change of the object, to-many sets included, bumps its version.
    private static func keepingUnfetchedKeys(of known: DepotObject, in fetched: DepotObject) -> DepotObject {
        guard let version = fetched.version, known.version == version else { return fetched }
        var merged = fetched
        for (key, value) in known.storage where merged.storage[key] == nil { merged.storage[key] = value }
        return merged
    }

    /// `object` under its permanent id when it is a copy of an inserted object saved since.
    private static func saved(_ object: DepotObject, in state: State) -> DepotObject {
        guard let id = state.permanentIDs[object.id] else { return object }
        var resolved = object
        resolved.id = id
        resolved.version = state.registered[id]?.base.version ?? object.version
        return resolved
    }

    static func current(_ registered: Registered) -> DepotObject {
        var object = registered.base
        object.storage.merge(registered.changes) { $1 }
        for (key, change) in registered.memberChanges {
            if let members = object.storage[key]?.arrayValue {
                object.storage[key] = .array(change.applied(to: members))
            }
        }
        return object
    }
}

/// What a merge of another process's save did to an ``ObjectContext``, like
/// `NSManagedObjectContextObjectsDidChange`.
public struct ObjectsDidChange: Sendable, Hashable {
    /// The transaction merged (`nil` for a refresh after a reconnect).
    public var transaction: Int64?
    /// Ids of registered objects whose values were refreshed.
    public var refreshed: [String]
    /// Ids of registered objects that were deleted in the store (and dropped from the context).
    public var deleted: [String]
    /// Set when the daemon ended the context's observer (`store/observeDidEnd`, for
    /// instance when the key's row-level scope could not be evaluated): merging has
    /// stopped, for the reason given; turn it on again once the cause is fixed.
    public var mergingEnded: String? = nil
}
