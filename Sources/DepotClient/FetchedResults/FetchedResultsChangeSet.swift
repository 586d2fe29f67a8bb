import DepotProtocol
import Foundation

/// Everything one `results/didChange` (or one resync) did to a
/// ``FetchedResultsController``'s results: what ``FetchedResultsController/changes()`` yields.
public struct FetchedResultsChangeSet<Object: Decodable & Sendable>: Sendable {
    /// One section insert or delete.
    public struct SectionChange: Sendable, Hashable {
        /// Insert or delete.
        public var type: FetchedResultsChangeType
        /// The index: in the old results for deletes, the new ones for inserts.
        public var index: Int
        /// The section's name.
        public var name: String

        /// Creates a section change.
        public init(type: FetchedResultsChangeType, index: Int, name: String) {
            self.type = type
            self.index = index
            self.name = name
        }
    }

    /// One object change.
    public struct ObjectChange: Sendable {
        /// What happened.
        public var type: FetchedResultsChangeType
        /// The position in the old results (delete, move, update).
        public var indexPath: IndexPath?
        /// The position in the new results (insert, move, update).
        public var newIndexPath: IndexPath?
        /// The object's id.
        public var id: String
        /// The object's values (its last known values for a delete; `nil` when it was never loaded).
        public var object: Object?
    }

    /// The subscription's sequence number after the change.
    public var seq: Int64
    /// The transaction that made the change (the last one of a coalesced change), when known.
    public var transaction: Int64?
    /// The transactions the change covers, first to last: one transaction
    /// (`t...t`) without coalescing, several when the controller's
    /// ``FetchedResultsController/coalescingInterval`` folded them; `nil` for a reload.
    public var transactions: ClosedRange<Int64>?
    /// Whether the results were reloaded from scratch (after a gap, an
    /// invalidation or a reconnect): then the section and object changes are
    /// empty and only ``snapshot`` tells the new state.
    public var isReload: Bool
    /// Section inserts and deletes.
    public var sectionChanges: [SectionChange]
    /// Object inserts, deletes, moves and updates.
    public var objectChanges: [ObjectChange]
    /// The results after the change.
    public var snapshot: FetchedResultsSnapshot
}
