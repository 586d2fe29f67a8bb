import DepotProtocol
import DepotStore

/// The transactions a coalescing result set (`coalesceMs`) has applied but not
/// yet announced, folded so that one `results/didChange` can take subscribers
/// from the results before the first to the results after the last, under the
/// same apply rule (DESIGN.md §7).
///
/// Only what the window touched is kept: for every object that appeared in a
/// transaction's delta, where it stood (flat position among what subscribers
/// see) and its sort key when the window opened. Positions learned at a later
/// transaction are mapped back through the earlier ones' removals and
/// insertions, which is exact for an object those transactions did not touch.
/// Objects no transaction touched keep their relative order, so the composed
/// delta needs nothing about them.
struct CoalescingWindow: Sendable {
    /// The first transaction folded in.
    let first: Int64
    /// The last transaction folded in.
    private(set) var last: Int64
    /// The sections subscribers saw when the window opened.
    let startSections: [(value: SortValue, count: Int)]
    /// Per touched object: its flat position and sort key when the window opened (`nil`: not shown then).
    private var origins: [Int64: (position: Int?, key: SortKey?)] = [:]
    /// Objects that had an update, a move or an insert: their values may have changed.
    private var changed: Set<Int64> = []
    /// Each folded transaction's removed (old) and inserted (new) flat positions, ascending.
    private var steps: [(removed: [Int], inserted: [Int])] = []

    /// Opens a window at `transaction` over results shown in `sections`.
    init(opening transaction: Int64, sections: [(value: SortValue, count: Int)]) {
        first = transaction
        last = transaction
        startSections = sections
    }

    /// Folds one transaction's delta in.
    ///
    /// - Parameters:
    ///   - oldSections: the sections shown before it, `newSections` after.
    ///   - oldKeys: sort keys before it of the rows it changed; other rows' keys did not change.
    ///   - currentKey: a row's key now (for rows the transaction did not change).
    mutating func fold(
        _ delta: ResultSet.Delta, transaction: Int64, oldSections: [(value: SortValue, count: Int)],
        newSections: [(value: SortValue, count: Int)], oldKeys: [Int64: SortKey], currentKey: (Int64) -> SortKey?
    ) {
        last = transaction
        var removed: [Int] = []
        var inserted: [Int] = []
        for change in delta.objects {
            let old = change.old.map { SectionPaths.flat($0, in: oldSections) }
            let new = change.new.map { SectionPaths.flat($0, in: newSections) }
            if origins[change.id] == nil {
                origins[change.id] = (
                    old.map { mapBack($0) }, old == nil ? nil : oldKeys[change.id] ?? currentKey(change.id)
                )
            }
            switch change.type {
            case .delete: removed.append(old!)
            case .insert:
                // Shown again: its values may have changed while it was not (a window's object pulled back in).
                inserted.append(new!)
                changed.insert(change.id)
            case .move:
                removed.append(old!)
                inserted.append(new!)
                changed.insert(change.id)
            case .update: changed.insert(change.id)
            }
        }
        steps.append((removed.sorted(), inserted.sorted()))
    }

    /// The position before all folded steps of an object none of them touched, from its position after them.
    private func mapBack(_ position: Int) -> Int {
        var position = position
        for step in steps.reversed() {
            // Undo the insertions: fewer objects stood before it.
            position -= step.inserted.prefix { $0 < position }.count
            // Undo the removals: those that stood at or before it come back.
            for removed in step.removed {
                guard removed <= position else { break }
                position += 1
            }
        }
        return position
    }

    /// The one delta from the results when the window opened to the results now.
    ///
    /// - Parameters:
    ///   - sections: the sections shown now.
    ///   - position: where a row is shown now (`nil`: not shown).
    ///   - key: a row's sort key now.
    func composed(
        sections: [(value: SortValue, count: Int)], position: (Int64) -> Int?, key: (Int64) -> SortKey?
    ) -> ResultSet.Delta {
        var delta = ResultSet.Delta()
        for (index, section) in startSections.enumerated()
        where !sections.contains(where: { $0.value.compare(section.value) == 0 }) {
            delta.sections.append(SectionChange(type: .delete, index: index, name: section.value.sectionName))
        }
        for (index, section) in sections.enumerated()
        where !startSections.contains(where: { $0.value.compare(section.value) == 0 }) {
            delta.sections.append(SectionChange(type: .insert, index: index, name: section.value.sectionName))
        }
        for (id, origin) in origins.sorted(by: { $0.key < $1.key }) {
            let old = origin.position.map { SectionPaths.path($0, in: startSections) }
            let now = position(id)
            let new = now.map { SectionPaths.path($0, in: sections) }
            switch (old, new) {
            case (nil, nil): continue
            case (nil, let new?): delta.objects.append((.insert, id, nil, new))
            case (let old?, nil): delta.objects.append((.delete, id, old, nil))
            case (let old?, let new?):
                if origin.key != key(id) {
                    delta.objects.append((.move, id, old, new))
                } else if changed.contains(id) {
                    delta.objects.append((.update, id, old, new))
                }
            }
        }
        return delta
    }
}

/// Index paths and flat positions over a list of sections with their counts.
enum SectionPaths {
    /// The flat position of an index path.
    static func flat(_ path: [Int], in sections: [(value: SortValue, count: Int)]) -> Int {
        sections.prefix(path[0]).reduce(0) { $0 + $1.count } + path[1]
    }

    /// The index path of a flat position.
    static func path(_ flat: Int, in sections: [(value: SortValue, count: Int)]) -> [Int] {
        var rest = flat
        for (index, section) in sections.enumerated() {
            if rest < section.count { return [index, rest] }
            rest -= section.count
        }
        return [max(0, sections.count - 1), rest]
    }
}
