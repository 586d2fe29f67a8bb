// What the README's view controller uses of UIKit, so that its code compiles
// verbatim on Linux. Nothing here is Depot's.
import Foundation

@MainActor
final class UITableView {
    enum RowAnimation { case fade, none }

    func beginUpdates() {}
    func endUpdates() {}
    func reloadData() {}
    func insertSections(_ sections: IndexSet, with animation: RowAnimation) {}
    func deleteSections(_ sections: IndexSet, with animation: RowAnimation) {}
    func insertRows(at indexPaths: [IndexPath], with animation: RowAnimation) {}
    func deleteRows(at indexPaths: [IndexPath], with animation: RowAnimation) {}
    func moveRow(at indexPath: IndexPath, to newIndexPath: IndexPath) {}
    func reloadRows(at indexPaths: [IndexPath], with animation: RowAnimation) {}
}
