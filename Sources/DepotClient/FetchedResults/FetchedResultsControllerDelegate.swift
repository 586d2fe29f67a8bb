import DepotProtocol
import Foundation

/// What a ``FetchedResultsController`` tells as its results change, like
/// `NSFetchedResultsControllerDelegate`. Every method has a default that does nothing.
///
/// For one change the calls come in the order a table view needs:
/// ``controllerWillChangeContent(_:)``, then section changes, then object
/// changes, then ``controllerDidChangeContent(_:)`` and
/// ``controller(_:didChangeContentWith:)``. They run on the main actor, and the
/// controller's `sections` and `fetchedObjects` show the new results from the
/// first object change on.
///
/// The protocol is main-actor isolated, as UIKit's delegates are: a conforming
/// view controller needs nothing more (Swift 6.0 and later), and a type that is
/// not main-actor isolated cannot be made a delegate by mistake. To follow the
/// changes on another actor, iterate ``FetchedResultsController/changes()``.
///
/// ```swift
/// extension TeamsViewController: FetchedResultsControllerDelegate {
///     func controllerWillChangeContent(_ controller: any FetchedResultsControlling) { tableView.beginUpdates() }
///     func controller(_ controller: any FetchedResultsControlling, didChange anObject: Any,
///                     at indexPath: IndexPath?, for type: FetchedResultsChangeType, newIndexPath: IndexPath?) {
///         switch type {
///         case .insert: tableView.insertRows(at: [newIndexPath!], with: .fade)
///         case .delete: tableView.deleteRows(at: [indexPath!], with: .fade)
///         case .move: tableView.moveRow(at: indexPath!, to: newIndexPath!)
///         case .update: tableView.reloadRows(at: [indexPath!], with: .none)
///         }
///     }
///     func controllerDidChangeContent(_ controller: any FetchedResultsControlling) { tableView.endUpdates() }
///     func controllerDidReloadContent(_ controller: any FetchedResultsControlling) { tableView.reloadData() }
/// }
/// ```
@MainActor
public protocol FetchedResultsControllerDelegate: AnyObject {
    /// Called before the first change of a batch (`beginUpdates`).
    func controllerWillChangeContent(_ controller: any FetchedResultsControlling)

    /// Called for each inserted or deleted section, before the object changes.
    func controller(
        _ controller: any FetchedResultsControlling, didChange sectionInfo: any FetchedResultsSectionInfo,
        atSectionIndex sectionIndex: Int, for type: FetchedResultsChangeType)

    /// Called for each inserted, deleted, moved or updated object. `anObject`
    /// is the controller's `Object` type, or a ``DepotObject`` fault for a
    /// deleted object that was never loaded. `indexPath` is in the old results
    /// (delete, move, update), `newIndexPath` in the new ones (insert, move, update).
    func controller(
        _ controller: any FetchedResultsControlling, didChange anObject: Any, at indexPath: IndexPath?,
        for type: FetchedResultsChangeType, newIndexPath: IndexPath?)

    /// Called after the last change of a batch (`endUpdates`).
    func controllerDidChangeContent(_ controller: any FetchedResultsControlling)

    /// Called after ``controllerDidChangeContent(_:)`` (or after a reload) with the whole new shape.
    func controller(_ controller: any FetchedResultsControlling, didChangeContentWith snapshot: FetchedResultsSnapshot)

    /// Called instead of the change callbacks when the results were reloaded
    /// from scratch (a missed notification, an invalidated subscription or a
    /// reconnect to a restarted daemon): redraw everything (`reloadData`).
    func controllerDidReloadContent(_ controller: any FetchedResultsControlling)

    /// The index title for a section name; `nil` for the default (the capitalised first letter).
    func controller(_ controller: any FetchedResultsControlling, sectionIndexTitleForSectionName sectionName: String)
        -> String?

    /// Called when the daemon ended the subscription (`results/didInvalidate`) and the
    /// controller could not subscribe to its request again: with reason `"model"`, a migration
    /// renamed or removed a key the request names (DESIGN.md §7, Across a migration), and
    /// `error` is the daemon's answer to the request now (-32602 naming the key). The results
    /// shown stay as they were and no longer change; set a new ``FetchedResultsController/fetchRequest``
    /// and call ``FetchedResultsController/performFetch()`` to follow the store again.
    func controller(_ controller: any FetchedResultsControlling, didEnd end: FetchedResultsEnd)
}

/// Why a controller's results stopped following the store
/// (``FetchedResultsControllerDelegate/controller(_:didEnd:)``, ``FetchedResultsController/end``).
public struct FetchedResultsEnd: Sendable {
    /// The reason the daemon gave in `results/didInvalidate` (`"model"`).
    public let reason: String
    /// The daemon's answer to subscribing to the request again.
    public let error: DepotClientError
}

extension FetchedResultsControllerDelegate {
    /// Does nothing.
    public func controllerWillChangeContent(_ controller: any FetchedResultsControlling) {}
    /// Does nothing.
    public func controller(
        _ controller: any FetchedResultsControlling, didChange sectionInfo: any FetchedResultsSectionInfo,
        atSectionIndex sectionIndex: Int, for type: FetchedResultsChangeType
    ) {}
    /// Does nothing.
    public func controller(
        _ controller: any FetchedResultsControlling, didChange anObject: Any, at indexPath: IndexPath?,
        for type: FetchedResultsChangeType, newIndexPath: IndexPath?
    ) {}
    /// Does nothing.
    public func controllerDidChangeContent(_ controller: any FetchedResultsControlling) {}
    /// Does nothing.
    public func controller(
        _ controller: any FetchedResultsControlling, didChangeContentWith snapshot: FetchedResultsSnapshot
    ) {}
    /// Does nothing.
    public func controllerDidReloadContent(_ controller: any FetchedResultsControlling) {}
    /// Returns `nil`: the default title.
    public func controller(
        _ controller: any FetchedResultsControlling, sectionIndexTitleForSectionName sectionName: String
    ) -> String? { nil }
    /// Does nothing.
    public func controller(_ controller: any FetchedResultsControlling, didEnd end: FetchedResultsEnd) {}
}

/// A ``FetchedResultsController`` of any object type, as its delegate sees it
/// (Core Data passes `NSFetchedResultsController<NSFetchRequestResult>`).
public protocol FetchedResultsControlling: AnyObject, Sendable {
    /// The request the controller keeps live.
    var fetchRequest: FetchRequest { get }
    /// The sections' names, index titles and sizes.
    var sectionInfos: [any FetchedResultsSectionInfo] { get }
    /// The ids of every fetched object, in order.
    var fetchedIDs: [String] { get }
    /// The object at `indexPath` (faulting in its batch if needed), as `Any`.
    func anyObject(at indexPath: IndexPath) -> Any
}
