import DepotProtocol
import Foundation
import Synchronization

/// Keeps the results of a fetch request live across processes, like
/// `NSFetchedResultsController`: sorted, optionally sectioned, and updated by
/// the daemon's `results/didChange` deltas whenever any client saves.
///
/// ```swift
/// let request = FetchRequest(entity: "Team", sortDescriptors: [
///     SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false),
///     SortDescriptor(key: "teamName"),
/// ])
/// let controller = FetchedResultsController(
///     fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone", cacheName: "teams")
/// controller.delegate = self
/// try await controller.performFetch()
/// let first = controller.object(at: IndexPath(item: 0, section: 0))
/// ```
///
/// Differences from Core Data, by design:
/// - `performFetch()` is `async` (it is a round trip), and the delegate is a
///   main-actor protocol, like UIKit's delegates: it is set and called on the
///   main actor, so a delegate that is not main-actor isolated does not compile.
///   Elsewhere, iterate ``changes()`` (any task, any actor).
/// - `Object` is ``DepotObject`` or your own `Decodable` type
///   (``FetchRequestResult``); the delegate gets it as `Any`, as Core Data's does.
/// - `fetchLimit`/`fetchOffset` keep a live window (a top 10, a page), where
///   Core Data's controller lets the results grow past the limit: an object
///   pushed out of the window by a save anywhere is a `.delete`, one pulled in
///   an `.insert`; sections, objects and index paths are the window's.
/// - With `fetchBatchSize` > 0 only ids are held for objects not yet touched;
///   ``object(at:)`` loads their batch with `results/objects`, blocking for one
///   round trip. Prefetch with ``loadObjects(at:)`` to avoid that.
/// - A missed notification, a `results/didInvalidate` or a reconnect to a
///   restarted daemon resyncs by itself and reports
///   ``FetchedResultsControllerDelegate/controllerDidReloadContent(_:)``; with a
///   ``persistentStore``, a reconnect catches up instead where history allows
///   (one ordinary change, as ``performFetch()`` does).
///
/// All members but ``delegate`` are safe to call from any task or thread. The
/// ones that compute index titles (``sections``, ``sectionIndexTitles``,
/// ``section(forSectionIndexTitle:at:)``) ask the delegate's
/// `controller(_:sectionIndexTitleForSectionName:)` when called on the main
/// actor, and use the default titles elsewhere.
public final class FetchedResultsController<Object: Decodable & Sendable>: FetchedResultsControlling,
    @unchecked Sendable
{
    // @unchecked: every mutable member is behind `state`, or isolated to the main actor (`delegate`).
    struct Entry {
        var raw: DepotObject
        var object: Object?
    }

    struct State {
        var fetchRequest: FetchRequest
        var layout: ResultsLayout?
        var subscription: String?
        var transaction: Int64?
        var entries: [String: Entry] = [:]
        /// With ``FetchRequest/relationshipKeyPathsForPrefetching``: the objects the rows reach, by id, kept live.
        var related: [String: DepotObject] = [:]
        var indexPaths: [String: IndexPath]?
        var listener: Task<Void, Never>?
        /// The persistent store's file and this controller's key in it, once opened.
        var replica: (file: ResultsReplicaFile, key: String)?
        /// Why the results could not be written to the persistent store last time, if they could not.
        var persistentStoreError: DepotClientError?
        /// Showing a persistent store's results because the daemon was out of reach at
        /// ``performFetch()``: the next new session subscribes.
        var subscribesOnReconnect = false
        /// How the stored results were last brought up to date.
        var lastCatchUp: FetchedResultsCatchUp?
        /// What the persistent store lacks since its last write.
        var replicaWrites = ReplicaWrites()
        /// The model version the results are of, as far as known (kept with them in the persistent store).
        var modelVersion: Int64?
        /// Why the results stopped following the store, if they did (until the next ``performFetch()``).
        var end: FetchedResultsEnd?
    }

    /// The connection the results come through.
    public let connection: DepotConnection
    /// The key path whose value names each object's section; `nil` for one unnamed section.
    public let sectionNameKeyPath: String?
    /// The name under which the daemon keeps the results across restarts.
    public let cacheName: String?
    /// How long the daemon folds transactions into one change (`coalesceMs`);
    /// `nil` for one change per transaction.
    public let coalescingInterval: Duration?
    /// The local SQLite file the results are kept in across runs, if any.
    public let persistentStore: URL?
    let state: Mutex<State>
    /// Writes the results to the ``persistentStore`` in order, behind the changes they follow
    /// (``persistBehind()``).
    let replicaWriter = DispatchQueue(label: "depot.results.persistent-store")
    /// What ``changes()`` streams.
    let changeBroadcaster = Broadcaster<FetchedResultsChangeSet<Object>>()
    /// The delegate, held weakly, like `NSFetchedResultsController.delegate`. It
    /// is main-actor isolated, as the protocol is: set it, and hear from it, on the main actor.
    @MainActor public weak var delegate: (any FetchedResultsControllerDelegate)?

    /// Creates a controller; nothing is fetched until ``performFetch()``.
    ///
    /// - Parameters:
    ///   - fetchRequest: the request; `sort` is required (it orders the results).
    ///     Its `fetchBatchSize` decides how many objects are loaded at a time (0: all);
    ///     its `fetchLimit` and `fetchOffset`, when set, make the results a live window.
    ///   - connection: the session to the daemon.
    ///   - sectionNameKeyPath: the key path that names sections; it must be the first sort key.
    ///   - cacheName: a name for the daemon to keep the results under across restarts.
    ///   - coalescingInterval: when set, the daemon folds the transactions of each
    ///     such interval into one change (`coalesceMs`), so the delegate hears one
    ///     will/did cycle per interval however many saves it covered (a UI redrawing
    ///     at 60 Hz under an importer: `.milliseconds(16)`). The change set's
    ///     ``FetchedResultsChangeSet/transactions`` says which transactions it covers.
    ///     Rounded up to whole milliseconds; `nil` or zero: one change per transaction.
    ///   - persistentStore: a local SQLite file to keep the results in (ids, sections, the loaded
    ///     objects' values, the transaction they reflect). ``performFetch()`` then shows what the
    ///     file holds before the daemon answers, and every change is written back. Several
    ///     controllers may share one file. `nil`: nothing is kept.
    public init(
        fetchRequest: FetchRequest, connection: DepotConnection, sectionNameKeyPath: String? = nil,
        cacheName: String? = nil, coalescingInterval: Duration? = nil, persistentStore: URL? = nil
    ) {
        self.connection = connection
        self.persistentStore = persistentStore
        self.sectionNameKeyPath = sectionNameKeyPath
        self.cacheName = cacheName
        self.coalescingInterval = coalescingInterval.flatMap { $0 > .zero ? $0 : nil }
        self.state = Mutex(State(fetchRequest: fetchRequest))
    }

    deinit {
        let (listener, subscription) = state.withLock { ($0.listener, $0.subscription) }
        listener?.cancel()
        if let subscription {
            let connection = connection
            Task { _ = try? await connection.call(ResultsUnsubscribe.self, .init(subscription: subscription)) }
        }
    }

    /// Why the results stopped following the store, if they did: the daemon ended the subscription
    /// and refused its request again (``FetchedResultsControllerDelegate/controller(_:didEnd:)``);
    /// `nil` again after ``performFetch()``.
    public var end: FetchedResultsEnd? { state.withLock { $0.end } }

    /// The request; change it and call ``performFetch()`` again to fetch anew.
    public var fetchRequest: FetchRequest {
        get { state.withLock { $0.fetchRequest } }
        set { state.withLock { $0.fetchRequest = newValue } }
    }

    // MARK: Fetching

    /// Subscribes to the request's results (`results/subscribe`) and loads the
    /// first batch; from then on the results follow every committed change.
    /// Calling it again starts over (a new subscription for the current request).
    /// It calls no delegate method, except with a ``persistentStore`` that holds
    /// results for the request: those are shown at once, before the daemon
    /// answers, and reported as a reload
    /// (``FetchedResultsControllerDelegate/controllerDidReloadContent(_:)`` and a
    /// ``changes()`` element with `isReload`); then the controller catches up:
    /// it asks for the current ids, reads `store/history` since the stored
    /// transaction, fetches only the objects that changed, and reports the
    /// difference as one ordinary change (``lastCatchUp`` says what it did).
    /// Where history no longer reaches back, the daemon's results replace the
    /// stored ones in full, reported as a reload again. Should the daemon be out
    /// of reach (the call times out or the link drops), the stored results stay
    /// and this returns: the controller catches up as soon as the connection
    /// opens a new session (``subscription`` is `nil` until then).
    public func performFetch() async throws(DepotClientError) {
        let old = state.withLock { state in
            defer {
                state.listener?.cancel()
                state.listener = nil
                state.subscribesOnReconnect = false
                state.end = nil
            }
            return state.subscription
        }
        if let old { _ = try? await connection.call(ResultsUnsubscribe.self, .init(subscription: old)) }
        // Listen before subscribing, so that no notification can slip between.
        let inputs = Inputs(connection: connection)
        let showedStored = try await showStoredResults()
        let fetched: Fetched
        do throws(DepotClientError) {
            // No session (a cold start with the daemon down, a dropped link): serve the stored results.
            if showedStored, connection.state != .connected { throw .connectionLost(method: ResultsSubscribe.name) }
            if showedStored, try await catchUp() {
                listen(to: inputs)
                return
            }
            fetched = try await subscribe()
            if showedStored { recordResync(fetched) }
        } catch  where showedStored && error.leftTheDaemonUnreached {
            // Offline: the stored results stay; the first new session subscribes (`resync`).
            state.withLock { $0.subscribesOnReconnect = true }
            listen(to: inputs)
            return
        }
        state.withLock { state in
            state.layout = fetched.layout
            state.subscription = fetched.subscription
            state.transaction = fetched.transaction
            state.entries = fetched.entries
            state.related = fetched.related
            state.replicaWrites.all = true
            state.indexPaths = nil
        }
        if showedStored { await announceReload(layout: fetched.layout, transaction: fetched.transaction) }
        // The results are in memory: the file catches up behind (the first write of a big result is slow).
        persistBehind()
        listen(to: inputs)
    }

    /// Handles the connection's notifications and events from now on.
    private func listen(to inputs: Inputs) {
        let listener = Task { [weak self] in
            for await input in inputs.stream {
                guard let self else { break }
                await self.handle(input)
            }
            inputs.cancel()
        }
        state.withLock { $0.listener = listener }
    }

    struct Fetched {
        var subscription: String
        var layout: ResultsLayout
        var transaction: Int64
        var entries: [String: Entry]
        var related: [String: DepotObject] = [:]
    }

    /// One `results/subscribe`, plus a `results/snapshot` for the ids when only the first batch came.
    func subscribe() async throws(DepotClientError) -> Fetched {
        let request = fetchRequest
        // The model the results come in, recorded with them in the persistent store.
        if persistentStore != nil { _ = await learnModelVersion() }
        let include: ResultsInclude = request.fetchBatchSize > 0 ? .firstBatch : .all
        let result = try await connection.call(
            ResultsSubscribe.self,
            .init(
                request: request, sectionKeyPath: sectionNameKeyPath, cacheName: cacheName, include: include,
                coalesceMs: coalesceMilliseconds))
        var entries: [String: Entry] = [:]
        var ordered: [String] = []
        for json in result.objects {
            let raw = try Self.row(json, of: request)
            entries[raw.id] = Entry(raw: raw, object: try? Object.make(from: raw))
            ordered.append(raw.id)
        }
        let layout: ResultsLayout
        if result.objects.count == result.count {
            var ids = ordered[...]
            var sections: [ResultsLayout.Section] = []
            for info in result.sections {
                sections.append(
                    ResultsLayout.Section(
                        name: info.name, indexTitle: info.indexTitle, ids: Array(ids.prefix(info.count))))
                ids = ids.dropFirst(info.count)
            }
            layout = ResultsLayout(seq: result.seq, sections: sections)
        } else {
            let snapshot = try await connection.call(ResultsSnapshot.self, .init(subscription: result.subscription))
            do {
                layout = try ResultsLayout(snapshot: snapshot)
            } catch {
                throw .invalidResponse("results/snapshot: \(error)")
            }
        }
        return Fetched(
            subscription: result.subscription, layout: layout, transaction: result.transaction, entries: entries,
            related: Self.relatedObjects(result.related))
    }

    /// The wire's `related` as objects by id (those that do not decode are left out).
    static func relatedObjects(_ related: [String: JSONValue]?) -> [String: DepotObject] {
        var objects: [String: DepotObject] = [:]
        for (id, json) in related ?? [:] { objects[id] = try? DepotObject(json: json) }
        return objects
    }

    /// Every related object the rows reach, by id (a prefetched relationship's, kept live).
    func relatedObjects() -> [String: DepotObject] { state.withLock { $0.related } }

    /// A related object the rows reach (a prefetched relationship, kept live), by id: no round trip.
    public func relatedObject(withID id: String) -> DepotObject? {
        state.withLock { $0.related[id] }
    }

    /// The object a prefetched to-one relationship `key` of `object` (a row or a related
    /// object) points to, as the results hold it: no round trip; `nil` when it points nowhere
    /// or the object is not held (outside the key's scope).
    public func relatedObject(_ key: String, of object: DepotObject) -> DepotObject? {
        object.objectID(key).flatMap { relatedObject(withID: $0) }
    }

    /// The objects a prefetched to-many relationship `key` of `object` holds, as the results hold them.
    public func relatedObjects(_ key: String, of object: DepotObject) -> [DepotObject]? {
        object.objectIDs(key).map { ids in state.withLock { state in ids.compactMap { state.related[$0] } } }
    }

    /// A row of the results as an object: a wire object, or for a grouped
    /// request a group's dictionary with the `id` the daemon gives it
    /// (DESIGN.md §7, Live grouped results); its values are the dictionary without the id.
    static func row(_ json: JSONValue, of request: FetchRequest) throws(DepotClientError) -> DepotObject {
        guard request.isGrouped else { return try DepotObject(json: json) }
        guard var values = json.objectValue, case .string(let id)? = values.removeValue(forKey: "id") else {
            throw .invalidResponse("a group must be a JSON object with its id: \(json.excerpt())")
        }
        return DepotObject(id: id, entity: request.entity, values: values)
    }

    /// ``coalescingInterval`` in whole milliseconds, rounded up; `nil` without one.
    var coalesceMilliseconds: Int? {
        guard let interval = coalescingInterval else { return nil }
        let (seconds, attoseconds) = interval.components
        return Int(seconds) * 1000 + Int((attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }

    /// Removes the daemon's cache named `name` (every cache when `nil`), like
    /// `NSFetchedResultsController.deleteCache(withName:)`.
    public static func deleteCache(withName name: String?, connection: DepotConnection) async throws(DepotClientError) {
        _ = try await connection.call(ResultsDeleteCache.self, .init(cacheName: name))
    }

    /// Ends the subscription; the results stay as they are.
    public func unsubscribe() async {
        // The last change may have been announced but not yet written back: a persistent store keeps it.
        replicaWriter.sync { persist() }
        let subscription = state.withLock { state in
            defer {
                state.listener?.cancel()
                state.listener = nil
                state.subscription = nil
            }
            return state.subscription
        }
        if let subscription {
            _ = try? await connection.call(ResultsUnsubscribe.self, .init(subscription: subscription))
        }
    }

    // MARK: Results

    /// The subscription's id, once fetched.
    public var subscription: String? { state.withLock { $0.subscription } }

    /// The results' shape (sections of ids) and `seq`, once fetched.
    public var layout: ResultsLayout? { state.withLock { $0.layout } }

    /// The results as a snapshot of section names and ids, once fetched.
    public var snapshot: FetchedResultsSnapshot? { layout.map(FetchedResultsSnapshot.init) }

    /// Every fetched object in order, `nil` before ``performFetch()``. Objects
    /// not loaded yet are loaded first (blocking); with a large batched result prefer ``object(at:)``.
    public var fetchedObjects: [Object]? {
        guard let layout else { return nil }
        var missing = state.withLock { state in layout.ids.filter { state.entries[$0] == nil } }
        if !missing.isEmpty {
            fillFromPersistentStore(ids: missing)
            missing = state.withLock { state in missing.filter { state.entries[$0] == nil } }
        }
        if !missing.isEmpty { try? loadBlocking(ids: missing) }
        return layout.sections.indices.flatMap { section in
            layout.sections[section].ids.indices.map { object(at: IndexPath(indexes: [section, $0])) }
        }
    }

    /// The sections, `nil` before ``performFetch()``.
    public var sections: [FetchedResultsSection<Object>]? {
        guard let layout else { return nil }
        return layout.sections.enumerated().map { index, section in
            FetchedResultsSection(
                name: section.name, indexTitle: indexTitle(for: section), ids: section.ids, index: index,
                controller: self)
        }
    }

    /// The object at `indexPath`. An object not loaded yet is loaded with its
    /// batch (`results/objects`), blocking for one round trip.
    ///
    /// - Precondition: `indexPath` is within the results, and the object can be
    ///   loaded and made into `Object` (Core Data raises in the same cases).
    public func object(at indexPath: IndexPath) -> Object {
        switch lookup(at: indexPath) {
        case .object(let object):
            return object
        case .undecodable(let raw):
            preconditionFailure(
                "\(raw.id) cannot be made into \(Object.self): \((try? Object.make(from: raw)) == nil ? "decoding failed" : "")"
            )
        case .outOfRange:
            preconditionFailure("no object at \(Array(indexPath)) in \(layout?.sections.map(\.ids.count) ?? [])")
        case .fault:
            fillFromPersistentStore(ids: batchIDs(around: indexPath))
            if case .object(let object) = lookup(at: indexPath) { return object }
            do {
                try loadBatchBlocking(around: indexPath)
            } catch {
                preconditionFailure("could not load the object at \(Array(indexPath)): \(error)")
            }
            guard case .object(let object) = lookup(at: indexPath) else {
                preconditionFailure("the object at \(Array(indexPath)) could not be loaded or made into \(Object.self)")
            }
            return object
        }
    }

    /// The id of the object at `indexPath` (`Entity/rowid`, from the wire, whatever
    /// `Object` is); `nil` when the index path is out of range.
    public func objectID(at indexPath: IndexPath) -> String? {
        state.withLock { $0.layout?.id(at: indexPath) }
    }

    /// The index path of the object with `id`; `nil` when it is not in the results.
    public func indexPath(forID id: String) -> IndexPath? {
        state.withLock { state in
            if state.indexPaths == nil, let layout = state.layout {
                var paths: [String: IndexPath] = [:]
                for (section, info) in layout.sections.enumerated() {
                    for (item, id) in info.ids.enumerated() { paths[id] = IndexPath(indexes: [section, item]) }
                }
                state.indexPaths = paths
            }
            return state.indexPaths?[id]
        }
    }

    /// The distinct index titles of the sections, in order.
    public var sectionIndexTitles: [String] {
        var seen: Set<String> = []
        return (layout?.sections ?? []).compactMap { section in
            let title = indexTitle(for: section)
            return seen.insert(title).inserted ? title : nil
        }
    }

    /// The index of the first section with index title `title`; `sectionIndex`
    /// (clamped to the sections) when no section has it.
    public func section(forSectionIndexTitle title: String, at sectionIndex: Int) -> Int {
        let sections = layout?.sections ?? []
        if let found = sections.firstIndex(where: { indexTitle(for: $0) == title }) { return found }
        return max(0, min(sectionIndex, sections.count - 1))
    }

    /// The index title of the section named `sectionName`: the delegate's, or the
    /// name's capitalised first letter.
    public func sectionIndexTitle(forSectionName sectionName: String) -> String? {
        delegateIndexTitle(forSectionName: sectionName) ?? ResultsLayout.indexTitle(forSectionName: sectionName)
    }

    private func indexTitle(for section: ResultsLayout.Section) -> String {
        delegateIndexTitle(forSectionName: section.name) ?? section.indexTitle
    }

    /// The delegate's index title, when called on the main actor (where the delegate lives).
    private func delegateIndexTitle(forSectionName name: String) -> String? {
        guard Thread.isMainThread else { return nil }
        return MainActor.assumeIsolated { delegate?.controller(self, sectionIndexTitleForSectionName: name) }
    }

    // MARK: Change stream

    /// Every change from now on, as change sets (a reload after a resync). Each
    /// call returns an independent stream; it ends when the controller goes away.
    public func changes() -> AsyncStream<FetchedResultsChangeSet<Object>> { changeBroadcaster.stream() }

    // MARK: FetchedResultsControlling

    /// The sections' names, index titles and sizes.
    public var sectionInfos: [any FetchedResultsSectionInfo] { sections ?? [] }

    /// The ids of every fetched object, in order.
    public var fetchedIDs: [String] { layout?.ids ?? [] }

    /// ``object(at:)`` as `Any`.
    public func anyObject(at indexPath: IndexPath) -> Any { object(at: indexPath) }

    /// Installs results as if fetched (tests of delta delivery without a daemon).
    func install(subscription: String, layout: ResultsLayout, objects: [DepotObject]) {
        state.withLock { state in
            state.subscription = subscription
            state.layout = layout
            state.indexPaths = nil
            state.entries = Dictionary(
                objects.map { ($0.id, Entry(raw: $0, object: try? Object.make(from: $0))) }, uniquingKeysWith: { $1 })
        }
    }

    // MARK: Lookup

    enum Lookup {
        case object(Object)
        case undecodable(DepotObject)
        case fault
        case outOfRange
    }

    func lookup(at indexPath: IndexPath) -> Lookup {
        state.withLock { state in
            guard let id = state.layout?.id(at: indexPath) else { return .outOfRange }
            guard let entry = state.entries[id] else { return .fault }
            return entry.object.map(Lookup.object) ?? .undecodable(entry.raw)
        }
    }
}
