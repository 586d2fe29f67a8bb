import DepotProtocol
import DepotStore

/// One maintained fetched-results set: the ordered (sort key, id) index and
/// section counts of a request, shared by every subscription whose request is
/// the same (DESIGN.md §7). It holds ids and sort keys only, never objects.
///
/// A class, so that the index is never copied: a value copy held by a reader
/// would make the writer's next change copy a million entries. Its mutable
/// state is touched only under ``ResultsEngine``'s lock (or before the set is
/// registered), hence `@unchecked Sendable`.
final class ResultSet: @unchecked Sendable {
    /// What makes two requests the same.
    let key: String
    /// The resolved request (entity, predicate SQL, sort expressions).
    let plan: FetchPlan
    /// The keys objects carry in notifications and pages.
    let shape: ObjectShape
    /// Whether sections follow the first sort key.
    let sectioned: Bool
    /// Changes to these entities may change the results.
    let dependencies: [Dependency]
    /// Keys whose change makes an `update`: the keys the objects carry, or
    /// every key (`nil`) when objects carry `version`, which any change bumps.
    let interestingKeys: Set<String>?
    /// The ordered index.
    var index: OrderedIndex
    /// Section values in order, with their object counts.
    var sections: [(value: SortValue, count: Int)]
    /// The last transaction the set reflects.
    var transaction: Int64
    /// The subscriptions sharing it.
    var subscribers: Set<String> = []
    /// The cache name it persists under, if any.
    var cacheName: String?

    /// How a change to another entity reaches this set's objects.
    enum Dependency: Sendable {
        /// A change to `entity` affects objects whose to-one path `path` leads to the changed rows.
        case path(entity: String, path: [String])
        /// A change to a row of `entity` affects the object its `inverse` column names (a to-many's owner).
        case owner(entity: String, inverse: String)
        /// A change to a row of `entity` affects the objects whose many-to-many `relationship` holds it.
        case joined(entity: String, relationship: String)
        /// A change to `entity` may affect any object (re-evaluate all: the slow fallback).
        case any(entity: String)

        var entity: String {
            switch self {
            case .path(let entity, _), .owner(let entity, _), .joined(let entity, _), .any(let entity): entity
            }
        }
    }

    init(
        key: String, plan: FetchPlan, shape: ObjectShape, sectioned: Bool, dependencies: [Dependency], rows: [KeyedRow],
        transaction: Int64
    ) {
        self.key = key
        self.plan = plan
        self.shape = shape
        self.sectioned = sectioned
        self.dependencies = dependencies
        self.interestingKeys = shape.includesVersion ? nil : Set(shape.keys + shape.toManyKeys)
        index = OrderedIndex(ascending: plan.sortExpressions.map(\.ascending))
        sections = []
        self.transaction = transaction
        reset(rows: rows, transaction: transaction)
    }

    /// Replaces the contents with `rows` (in order) as of `transaction`.
    func reset(rows: [KeyedRow], transaction: Int64) {
        beginBuilding(expectedCount: rows.count)
        for row in rows { append(row) }
        finishBuilding(transaction: transaction)
    }

    /// Empties the set for a build by ``append(_:)`` in order.
    func beginBuilding(expectedCount: Int) {
        index = OrderedIndex(ascending: index.ascending, expectedCount: expectedCount)
        sections = []
    }

    /// Appends the next row of an ordered read.
    func append(_ row: KeyedRow) {
        index.append(OrderedIndex.Entry(key: row.key, id: row.id))
        guard sectioned else { return }
        if let last = sections.last, last.value.compare(row.key.first) == 0 {
            sections[sections.count - 1].count += 1
        } else {
            sections.append((row.key.first, 1))
        }
    }

    /// Completes a build as of `transaction`.
    func finishBuilding(transaction: Int64) {
        index.finishAppending()
        if !sectioned { sections = [(.null, index.count)] }
        self.transaction = transaction
    }

    /// The set as a cache entry on disk.
    var cacheEntry: ResultsCacheEntry {
        ResultsCacheEntry(
            requestKey: key, transaction: transaction, rows: index.allEntries.map { KeyedRow(id: $0.id, key: $0.key) })
    }

    /// The section list for the wire.
    var sectionInfos: [SectionInfo] {
        if !sectioned { return [SectionInfo(name: "", indexTitle: "", count: index.count)] }
        return sections.map { Self.info($0.value, count: $0.count) }
    }

    static func info(_ value: SortValue, count: Int) -> SectionInfo {
        let name = value.sectionName
        return SectionInfo(name: name, indexTitle: name.first.map { String($0).uppercased() } ?? "", count: count)
    }

    // MARK: Deltas

    /// A computed change, before object values are attached.
    struct Delta: Sendable {
        var sections: [SectionChange] = []
        var objects: [(type: ObjectChange.Kind, id: Int64, old: [Int]?, new: [Int]?)] = []
        var isEmpty: Bool { sections.isEmpty && objects.isEmpty }
    }

    private var ascendingFirst: Bool { index.ascending.first ?? true }

    /// Where `value` belongs among `sections`: (index, found).
    private func sectionPosition(_ value: SortValue, in sections: [(value: SortValue, count: Int)]) -> (Int, Bool) {
        var low = 0
        var high = sections.count
        while low < high {
            let middle = (low + high) / 2
            var order = sections[middle].value.compare(value)
            if !ascendingFirst { order = -order }
            if order < 0 { low = middle + 1 } else { high = middle }
        }
        return (low, low < sections.count && sections[low].value.compare(value) == 0)
    }

    /// The index path of an entry that is in the index, against `sections`.
    private func indexPath(of id: Int64, key: SortKey, sections: [(value: SortValue, count: Int)]) -> [Int] {
        let rank = index.rank(of: id) ?? 0
        guard sectioned else { return [0, rank] }
        let (section, _) = sectionPosition(key.first, in: sections)
        let start = sections[..<section].reduce(0) { $0 + $1.count }
        return [section, rank - start]
    }

    private func adjustSection(_ value: SortValue, by delta: Int) {
        guard sectioned else {
            sections[0].count += delta
            return
        }
        let (position, found) = sectionPosition(value, in: sections)
        if found {
            sections[position].count += delta
        } else {
            sections.insert((value, delta), at: position)
        }
    }

    /// Applies the re-evaluated `candidates` (id → new key, or nil when it no
    /// longer matches or exists) and returns the changes in index paths.
    ///
    /// - Parameter touched: the keys the transaction changed per row (for updates).
    func apply(_ candidates: [Int64: SortKey?], touched: [Int64: Set<String>]) -> Delta {
        var deletes: [OrderedIndex.Entry] = []
        var moves: [(old: OrderedIndex.Entry, new: SortKey)] = []
        var updates: [OrderedIndex.Entry] = []
        var inserts: [OrderedIndex.Entry] = []
        for (id, newKey) in candidates {
            let old = index.entry(for: id)
            switch (old, newKey) {
            case (nil, nil): continue
            case (nil, let key?): inserts.append(.init(key: key, id: id))
            case (let entry?, nil): deletes.append(entry)
            case (let entry?, let key?):
                if entry.key != key {
                    moves.append((entry, key))
                } else if let keys = touched[id], !keys.isEmpty,
                    interestingKeys.map({ !$0.isDisjoint(with: keys) }) ?? true
                {
                    updates.append(entry)
                }
            }
        }
        var delta = Delta()
        guard !(deletes.isEmpty && moves.isEmpty && updates.isEmpty && inserts.isEmpty) else { return delta }
        let oldSections = sections
        var oldPaths: [Int64: [Int]] = [:]
        for entry in deletes + moves.map(\.old) + updates {
            oldPaths[entry.id] = indexPath(of: entry.id, key: entry.key, sections: oldSections)
        }
        for entry in deletes + moves.map(\.old) {
            index.remove(entry.id)
            adjustSection(entry.key.first, by: -1)
        }
        for entry in inserts + moves.map({ OrderedIndex.Entry(key: $0.new, id: $0.old.id) }) {
            index.insert(entry)
            adjustSection(entry.key.first, by: 1)
        }
        if sectioned { sections.removeAll { $0.count == 0 } }
        let newSections = sections
        if sectioned {
            for (position, section) in oldSections.enumerated() where !sectionPosition(section.value, in: newSections).1
            {
                delta.sections.append(SectionChange(type: .delete, index: position, name: section.value.sectionName))
            }
            for (position, section) in newSections.enumerated() where !sectionPosition(section.value, in: oldSections).1
            {
                delta.sections.append(SectionChange(type: .insert, index: position, name: section.value.sectionName))
            }
        }
        for entry in deletes {
            delta.objects.append((.delete, entry.id, oldPaths[entry.id], nil))
        }
        for entry in inserts {
            delta.objects.append(
                (.insert, entry.id, nil, indexPath(of: entry.id, key: entry.key, sections: newSections)))
        }
        for move in moves {
            delta.objects.append(
                (
                    .move, move.old.id, oldPaths[move.old.id],
                    indexPath(of: move.old.id, key: move.new, sections: newSections)
                ))
        }
        for entry in updates {
            delta.objects.append(
                (.update, entry.id, oldPaths[entry.id], indexPath(of: entry.id, key: entry.key, sections: newSections)))
        }
        return delta
    }
}
