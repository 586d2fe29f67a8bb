import DepotProtocol
import Foundation

/// The change that turns one layout into another, in the shape of a `results/didChange`
/// (DESIGN.md §7's apply rule): how a controller that caught up from its persistent store
/// reports the difference between the stored results and the daemon's as one ordinary change.
///
/// Sections are matched by name, objects by id. An object in both layouts stays put when it
/// keeps its section and its order relative to the others that stay (the longest run of them
/// kept in order, so as few objects as possible move); it is an `update` when its values changed.
/// Every other object in both is a `move`; the rest are inserts and deletes.
struct ResultsDifference {
    /// The section inserts and deletes.
    var sections: [SectionChange] = []
    /// The object inserts, deletes, moves and updates, without values.
    var objects: [ObjectChange] = []

    /// The difference from `old` to `new`, where `changed` holds the ids whose values changed.
    init(from old: ResultsLayout, to new: ResultsLayout, changed: Set<String>) {
        // Section names are user text: matched by bytes, as the daemon keeps them apart (DESIGN.md §4).
        let oldNames = old.sections.map { ByteString($0.name) }
        let newNames = new.sections.map { ByteString($0.name) }
        let newNameSet = Set(newNames)
        let oldNameSet = Set(oldNames)
        // Sections kept must keep their order; when they do not, every section is replaced.
        let keptOld = oldNames.filter { newNameSet.contains($0) }
        let keptNew = newNames.filter { oldNameSet.contains($0) }
        let sectionsKept = keptOld == keptNew ? Set(keptOld) : []
        for (index, name) in oldNames.enumerated() where !sectionsKept.contains(name) {
            sections.append(SectionChange(type: .delete, index: index, name: name.string))
        }
        for (index, name) in newNames.enumerated() where !sectionsKept.contains(name) {
            sections.append(SectionChange(type: .insert, index: index, name: name.string))
        }

        var oldPaths: [String: (section: Int, item: Int)] = [:]
        for (section, info) in old.sections.enumerated() {
            for (item, id) in info.ids.enumerated() { oldPaths[id] = (section, item) }
        }
        var newIDs: Set<String> = []
        for (section, info) in new.sections.enumerated() {
            let name = ByteString(info.name)
            let oldSection = sectionsKept.contains(name) ? oldNames.firstIndex(of: name) : nil
            // The objects that were in the same section, in their new order, by their old position.
            let candidates = info.ids.enumerated().compactMap { item, id -> (item: Int, oldItem: Int)? in
                guard let oldSection, let path = oldPaths[id], path.section == oldSection else { return nil }
                return (item, path.item)
            }
            let staying = Set(Self.longestIncreasingRun(candidates.map(\.oldItem)).map { candidates[$0].item })
            for (item, id) in info.ids.enumerated() {
                newIDs.insert(id)
                let newIndexPath = [section, item]
                guard let path = oldPaths[id] else {
                    objects.append(ObjectChange(type: .insert, newIndexPath: newIndexPath, id: id))
                    continue
                }
                let indexPath = [path.section, path.item]
                if !staying.contains(item) {
                    objects.append(ObjectChange(type: .move, indexPath: indexPath, newIndexPath: newIndexPath, id: id))
                } else if changed.contains(id) {
                    objects.append(
                        ObjectChange(type: .update, indexPath: indexPath, newIndexPath: newIndexPath, id: id))
                }
            }
        }
        for (section, info) in old.sections.enumerated() {
            for (item, id) in info.ids.enumerated() where !newIDs.contains(id) {
                objects.append(ObjectChange(type: .delete, indexPath: [section, item], id: id))
            }
        }
    }

    /// Whether nothing changed.
    var isEmpty: Bool { sections.isEmpty && objects.isEmpty }

    /// The positions in `values` of one longest strictly increasing subsequence (patience sorting).
    static func longestIncreasingRun(_ values: [Int]) -> [Int] {
        var tails: [Int] = []  // positions: tails[k] ends the best run of length k + 1
        var previous = [Int](repeating: -1, count: values.count)
        for (position, value) in values.enumerated() {
            var low = 0
            var high = tails.count
            while low < high {
                let middle = (low + high) / 2
                if values[tails[middle]] < value { low = middle + 1 } else { high = middle }
            }
            if low > 0 { previous[position] = tails[low - 1] }
            if low == tails.count { tails.append(position) } else { tails[low] = position }
        }
        var run: [Int] = []
        var position = tails.last ?? -1
        while position >= 0 {
            run.append(position)
            position = previous[position]
        }
        return run.reversed()
    }
}
