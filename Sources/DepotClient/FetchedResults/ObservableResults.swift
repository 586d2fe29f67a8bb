import DepotProtocol
import Foundation
import Observation
import Synchronization

/// Live fetched results as an `@Observable` model (DESIGN.md §9), for
/// SwiftUI-style code: its ``sections`` and ``objects`` are plain values that
/// change on the main actor as the daemon's deltas arrive, so a view (or
/// `withObservationTracking`) that reads them is told of each change.
///
/// ```swift
/// @MainActor
/// func showTeams(connection: DepotConnection) async throws {
///     let request = FetchRequest(
///         entity: "Team", sort: [SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "teamName")])
///     let results = ObservableResults<DepotObject>(
///         fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone")
///     try await results.performFetch()
///     for section in results.sections {
///         print(section.name, section.objects.map { $0.string("teamName") ?? "" })
///     }
/// }
/// ```
///
/// It wraps a ``FetchedResultsController`` (``controller``), which does the
/// work: subscribing, applying deltas, resyncing after a gap or a reconnect.
/// After each of the controller's changes it loads the objects not loaded yet
/// (with `fetchBatchSize`, a batch at a time, without blocking the main actor),
/// then publishes the new sections and objects at once. A load that fails
/// leaves the previous values and sets ``error``.
@MainActor
@Observable
public final class ObservableResults<Object: Decodable & Sendable> {
    /// One section of the results, as a value.
    public struct Section: Identifiable, Sendable {
        /// The section key's value as text (`""` for nil); also its identity.
        public let name: String
        /// The index title (by default the name's capitalised first letter).
        public let indexTitle: String?
        /// The ids of the section's objects, in order.
        public let ids: [String]
        /// The section's objects, in order.
        public let objects: [Object]

        /// The section's name, unique among the sections.
        public var id: String { name }
        /// How many objects the section has.
        public var numberOfObjects: Int { objects.count }
    }

    /// The sections, in order; empty before ``performFetch()``.
    public private(set) var sections: [Section] = []
    /// Every object, in order (the sections' objects one after the other).
    public private(set) var objects: [Object] = []
    /// The related objects the rows reach, by id, for a request with
    /// `relationshipKeyPathsForPrefetching` (DESIGN.md §7, Live relationships): kept live, so a
    /// view reading a related object through ``relatedObject(_:of:)`` is told when it changes.
    public private(set) var related: [String: DepotObject] = [:]
    /// Whether results are shown: the daemon's, or, before it answers, a persistent store's.
    public private(set) var isFetched = false
    /// Why the latest change could not be shown (loading its objects failed), if it could not;
    /// cleared by the next change shown.
    public private(set) var error: DepotClientError?

    /// The controller whose results these are.
    @ObservationIgnored public let controller: FetchedResultsController<Object>
    /// The task that shows the controller's changes (in a lock so that `deinit`, which is not
    /// isolated, can cancel it; `isolated deinit` needs Swift 6.2, the package asks for 6.1).
    @ObservationIgnored private let listener = Mutex<Task<Void, Never>?>(nil)

    /// Observes `controller`'s results; nothing is fetched until ``performFetch()``.
    public init(controller: FetchedResultsController<Object>) {
        self.controller = controller
    }

    /// Observes the results of a new ``FetchedResultsController`` made with these arguments.
    public convenience init(
        fetchRequest: FetchRequest, connection: DepotConnection, sectionNameKeyPath: String? = nil,
        cacheName: String? = nil, persistentStore: URL? = nil
    ) {
        self.init(
            controller: FetchedResultsController(
                fetchRequest: fetchRequest, connection: connection, sectionNameKeyPath: sectionNameKeyPath,
                cacheName: cacheName, persistentStore: persistentStore))
    }

    deinit {
        listener.withLock { $0?.cancel() }
    }

    /// Fetches (the controller's ``FetchedResultsController/performFetch()``), shows
    /// the results, and from then on shows every change. Calling it again starts over.
    public func performFetch() async throws(DepotClientError) {
        // Listen before fetching, so that no change can slip between (and results a persistent
        // store holds show while the daemon has not answered yet).
        let changes = controller.changes()
        let task = Task { [weak self] in
            for await _ in changes {
                guard let self else { return }
                await self.refresh()
            }
        }
        listener.withLock {
            $0?.cancel()
            $0 = task
        }
        try await controller.performFetch()
        await refresh()
    }

    /// Publishes the controller's current results, once their objects are loaded.
    private func refresh() async {
        var contents = controller.loadedContents()
        // A change may land while a batch loads, faulting in new ids: load until none is missing.
        for _ in 0..<3 {
            guard let current = contents, !current.missing.isEmpty else { break }
            do {
                try await controller.loadObjects(at: current.missing)
            } catch {
                self.error = error
                return
            }
            contents = controller.loadedContents()
        }
        guard let contents else { return }
        if let id = contents.missingIDs.first {
            error = .invalidResponse("\(id) could not be loaded as \(Object.self)")
            return
        }
        let sections = contents.layout.sections.map { section in
            Section(
                name: section.name, indexTitle: controller.sectionIndexTitle(forSectionName: section.name),
                ids: section.ids, objects: section.ids.compactMap { contents.objects[$0] })
        }
        self.sections = sections
        objects = sections.flatMap(\.objects)
        related = controller.relatedObjects()
        error = nil
        isFetched = true
    }

    /// The object a prefetched to-one relationship `key` of `object` (a row or a related object)
    /// points to, as the results hold it: no round trip; `nil` when it points nowhere or the
    /// object is not held (outside the key's scope).
    public func relatedObject(_ key: String, of object: DepotObject) -> DepotObject? {
        object.objectID(key).flatMap { related[$0] }
    }

    /// The objects a prefetched to-many relationship `key` of `object` holds, as the results hold them.
    public func relatedObjects(_ key: String, of object: DepotObject) -> [DepotObject]? {
        object.objectIDs(key).map { ids in ids.compactMap { related[$0] } }
    }
}

extension FetchedResultsController {
    /// The layout with the objects loaded for it, read at once, and where objects are missing.
    struct LoadedContents {
        var layout: ResultsLayout
        var objects: [String: Object]
        /// Index paths of objects not loaded yet, or not decodable as `Object`.
        var missing: [IndexPath]
        var missingIDs: [String]
    }

    /// The results as they are now; `nil` before ``performFetch()``.
    func loadedContents() -> LoadedContents? {
        state.withLock { state in
            guard let layout = state.layout else { return nil }
            var contents = LoadedContents(layout: layout, objects: [:], missing: [], missingIDs: [])
            for (sectionIndex, section) in layout.sections.enumerated() {
                for (item, id) in section.ids.enumerated() {
                    if let object = state.entries[id]?.object {
                        contents.objects[id] = object
                    } else {
                        contents.missing.append(IndexPath(indexes: [sectionIndex, item]))
                        contents.missingIDs.append(id)
                    }
                }
            }
            return contents
        }
    }
}
