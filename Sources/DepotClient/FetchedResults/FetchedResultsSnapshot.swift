import DepotProtocol

/// The whole shape of the results after a change: section names and object
/// ids, in the spirit of `NSDiffableDataSourceSnapshot` (what Core Data passes
/// to `controller(_:didChangeContentWith:)`).
public struct FetchedResultsSnapshot: Hashable, Sendable {
    /// The layout it describes.
    public let layout: ResultsLayout

    /// Creates a snapshot of `layout`.
    public init(layout: ResultsLayout) { self.layout = layout }

    /// The section names, in order.
    public var sectionIdentifiers: [String] { layout.sections.map(\.name) }
    /// Every object id, in order.
    public var itemIdentifiers: [String] { layout.ids }
    /// The number of sections.
    public var numberOfSections: Int { layout.sections.count }
    /// The number of objects.
    public var numberOfItems: Int { layout.count }

    /// The ids in the section named `identifier` (empty when there is none).
    public func itemIdentifiers(inSection identifier: String) -> [String] {
        layout.sections.first { $0.name.bytesEqual(identifier) }?.ids ?? []
    }
}
