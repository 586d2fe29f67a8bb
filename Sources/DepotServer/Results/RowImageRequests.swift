import DepotStore
import Synchronization

/// The entities whose changed rows' values (row images) commits carry: the
/// union of what the fetched-results engine and the observers ask for, handed
/// to ``Store/captureRowImages(of:)`` whenever either changes its part.
final class RowImageRequests: Sendable {
    /// Who asks.
    enum Asker: Sendable {
        /// The results engine, for the entities its sets follow from row images.
        case results
        /// The `store/observe` observers, for the values they send and the scopes they check.
        case observers
    }

    private let store: Store
    private let wanted = Mutex<[Asker: Set<String>]>([:])

    /// Requests handed to `store`.
    init(store: Store) { self.store = store }

    /// Sets `asker`'s part to `entities`; the store captures the union from its next commit on.
    func request(_ entities: Set<String>, for asker: Asker) {
        // Under the lock: two askers changing at once hand the store their union in order.
        wanted.withLock { wanted in
            wanted[asker] = entities
            store.captureRowImages(of: wanted.values.reduce(into: Set<String>()) { $0.formUnion($1) })
        }
    }
}
