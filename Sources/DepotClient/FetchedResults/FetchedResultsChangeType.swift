import DepotProtocol

/// The kind of change a ``FetchedResultsControllerDelegate`` hears about, like
/// `NSFetchedResultsChangeType`.
public enum FetchedResultsChangeType: Sendable, Hashable {
    /// A new object or section.
    case insert
    /// A removed object or section.
    case delete
    /// An object whose sort or section values changed (it carries its new values;
    /// the index paths may be equal).
    case move
    /// An object whose other values changed, in place.
    case update

    init(_ kind: ObjectChange.Kind) {
        switch kind {
        case .insert: self = .insert
        case .delete: self = .delete
        case .move: self = .move
        case .update: self = .update
        }
    }

    init(_ kind: SectionChange.Kind) {
        switch kind {
        case .insert: self = .insert
        case .delete: self = .delete
        }
    }
}
