import Foundation

/// What a ``FetchedResultsControllerDelegate`` learns about a section, like
/// `NSFetchedResultsSectionInfo`.
public protocol FetchedResultsSectionInfo: Sendable {
    /// The section key's value as text (`""` for nil).
    var name: String { get }
    /// The index title (by default the name's capitalised first letter).
    var indexTitle: String? { get }
    /// How many objects the section has.
    var numberOfObjects: Int { get }
}

/// One section of a ``FetchedResultsController``'s results.
public struct FetchedResultsSection<Object: Decodable & Sendable>: FetchedResultsSectionInfo {
    /// The section key's value as text (`""` for nil).
    public let name: String
    /// The index title (by default the name's capitalised first letter).
    public let indexTitle: String?
    /// The ids of the section's objects, in order (never faults in anything).
    public let ids: [String]
    let index: Int
    let controller: FetchedResultsController<Object>?

    /// How many objects the section has.
    public var numberOfObjects: Int { ids.count }

    /// The section's objects, in order. Objects not loaded yet are loaded a
    /// batch at a time (`fetchBatchSize`), blocking the caller for the round trip,
    /// as Core Data fires batch faults.
    public var objects: [Object] {
        guard let controller else { return [] }
        return ids.indices.map { controller.object(at: IndexPath(indexes: [index, $0])) }
    }
}
