import DepotProtocol
import Foundation

extension FetchedResultsController where Object: Identifiable, Object.ID == String {
    /// The index path of `object` in the results, by its `id` (`Entity/rowid`);
    /// `nil` when it is not there. For a type without an `id`, use ``indexPath(forID:)``
    /// with ``objectID(at:)``.
    public func indexPath(forObject object: Object) -> IndexPath? {
        indexPath(forID: object.id)
    }
}
