import DepotProtocol
import DepotStore

/// One maintained fetched-results set: the ordered (sort key, id) index and
/// section counts of a request, shared by every subscription whose request is
/// the same (DESIGN.md §7). It holds ids and sort keys only, never objects.
///
/// A class, so that the index is never copied: a value copy held by a reader
/// would make the writer's next change copy a million entries. Its mutable
/// state is touched only in publish-lane jobs (``ResultsEngine``), or by the
/// reader that builds it before a lane job installs it, hence `@unchecked Sendable`.
final class ResultSet: @unchecked Sendable {
    /// What makes two requests the same.
    let key: ByteString
    /// The resolved request (entity, predicate SQL, sort expressions).
    private(set) var plan: FetchPlan
    /// The keys objects carry in notifications and pages.
    private(set) var shape: ObjectShape
    /// Whether sections follow the first sort key.
    let sectioned: Bool
    /// Changes to these entities may change the results.
    private(set) var dependencies: [Dependency]
    /// Keys whose change makes an `update`: the keys the objects carry, or
    /// every key (`nil`) when objects carry `version`, which any change bumps.
    private(set) var interestingKeys: Set<String>?
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
    /// The live window `request.offset ..< offset + limit` subscribers see, or
    /// `nil` for the whole results.
    let window: Window?
    /// For a window of objects with a limit: how many of the first rows of the sorted results the
    /// index holds at most (those before the window, the window and a margin), `nil` when it holds
    /// every match. Rows beyond are not held: when rows leave and fewer than the window remain,
    /// the set refills with an indexed read of the first rows (``apply(_:touched:refill:)``).
    let capacity: Int?
    /// Whether matches beyond the rows held may exist (the index holds a prefix of the results).
    private(set) var truncated = false
    /// The rows a window holds beyond its end, at least.
    static let windowMargin = 64
    /// Milliseconds of transactions folded into one notification (`coalesceMs`); `nil`: one per transaction.
    let coalesceMilliseconds: Int?
    /// How to evaluate changed rows without a query, when the request allows it.
    private(set) var inMemory: InMemoryFollow?
    /// The transactions applied but not yet announced, when coalescing.
    var coalescing: CoalescingWindow?
    /// The groups of a live grouped result (DESIGN.md §7), whose index rows are
    /// group slots rather than object ids; `nil` for a set of objects.
    let grouped: GroupedResults?
    /// The checked request it follows, and the model it was checked against.
    var definition: ResultsDefinition?
    /// The live relationships of a request with `prefetch` (DESIGN.md §7), `nil` without.
    var related: RelatedGraph?

    /// Whether following a commit makes the set read the store even when the commit carries its
    /// changed rows' values (``CommittedTransaction/images``): groups read their members unless they
    /// read only their entity's own keys (``ResultsDefinition/membersInMemory``), a request
    /// through a relationship (or one not evaluated in memory) reads its candidates, objects with
    /// to-many keys read those, a window reads the values of rows a change elsewhere pulls in, and a
    /// prefetching set (``related``) reads the links of its rows.
    var readsStore: Bool {
        (grouped != nil ? definition?.membersInMemory == nil : inMemory == nil) || !shape.toManyKeys.isEmpty
            || window != nil || related != nil
    }

    /// The equality the set is filed under (``SetIndex``): none for a window holding a prefix,
    /// whose rows pulled in by a refill would have no filed value, nor for a prefetching set, which
    /// hears of its related entities' changes too.
    var filedEquality: (key: String, value: JSONValue)? {
        capacity == nil && related == nil ? inMemory?.equality : nil
    }

    /// A window of the sorted results (DESIGN.md §7: windows).
    struct Window: Sendable {
        /// The first position shown.
        let offset: Int
        /// How many positions at most; `nil`: to the end.
        let limit: Int?
    }

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
        key: ByteString, plan: FetchPlan, shape: ObjectShape, sectioned: Bool, dependencies: [Dependency],
        rows: [KeyedRow],
        transaction: Int64, coalesceMilliseconds: Int? = nil, inMemory: InMemoryFollow? = nil,
        grouped: GroupedResults? = nil
    ) {
        self.grouped = grouped
        self.coalesceMilliseconds = coalesceMilliseconds
        self.inMemory = inMemory
        self.key = key
        self.plan = plan
        self.shape = shape
        self.sectioned = sectioned
        self.dependencies = dependencies
        // A group's update is any change of its dictionary.
        self.interestingKeys = Self.interestingKeys(shape, grouped: grouped != nil)
        let (limit, offset) = grouped.map { ($0.plan.limit, $0.plan.offset) } ?? (plan.limit, plan.offset)
        window = limit == nil && (offset ?? 0) == 0 ? nil : Window(offset: offset ?? 0, limit: limit)
        capacity = grouped == nil ? limit.map { (offset ?? 0) + $0 + max(Self.windowMargin, $0) } : nil
        index = OrderedIndex(ascending: grouped?.ascending ?? plan.sortExpressions.map(\.ascending))
        sections = []
        self.transaction = transaction
        reset(rows: rows, transaction: transaction)
    }

    /// Takes the new model's plan of the same request (DESIGN.md §7, Across a migration): its
    /// rows and their order stay, since a migration changes no value the request reads.
    func redefine(_ definition: ResultsDefinition) {
        self.definition = definition
        plan = definition.plan
        shape = definition.plan.shape
        dependencies = definition.dependencies
        inMemory = definition.inMemory
        interestingKeys = Self.interestingKeys(shape, grouped: grouped != nil)
        if let plan = definition.grouped { grouped?.plan = plan }
    }

    private static func interestingKeys(_ shape: ObjectShape, grouped: Bool) -> Set<String>? {
        shape.includesVersion || grouped ? nil : Set(shape.keys + shape.toManyKeys)
    }

    /// Replaces the contents with `rows` (in order) as of `transaction`.
    func reset(rows: [KeyedRow], transaction: Int64) {
        let held = rows.prefix(capacity ?? rows.count)
        beginBuilding(expectedCount: held.count)
        for row in held { append(row) }
        finishBuilding(transaction: transaction)
    }

    /// Replaces the contents with `rows` from a results cache: a window holding a prefix cannot tell
    /// whether matches lie beyond the cached rows, so it assumes they may (a refill tells).
    func restore(rows: [KeyedRow], transaction: Int64) {
        reset(rows: rows, transaction: transaction)
        if capacity != nil { truncated = true }
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
        // A full read of the first `capacity` rows may have left more behind.
        truncated = capacity.map { index.count >= $0 } ?? false
    }

    /// Reads the set afresh from `store` (its groups, for a grouped set) and
    /// returns the transaction the read saw.
    @discardableResult
    func read(from store: Store, cancellation: Cancellation? = nil) throws(RPCError) -> Int64 {
        guard let grouped else {
            let transaction = try store.keyedRows(
                plan, cancellation: cancellation, first: capacity, expectedCount: { beginBuilding(expectedCount: $0) }
            ) { append($0) }
            finishBuilding(transaction: transaction)
            return transaction
        }
        grouped.clear()
        let transaction = try store.groupMembers(grouped.plan, cancellation: cancellation) {
            grouped.add($0, values: $1)
        }
        reset(rows: try grouped.finishBuilding(), transaction: transaction)
        return transaction
    }

    /// The wire id of the row `id` of the index: the object's, or the group's.
    func wireID(of id: Int64) -> String {
        grouped?.wireID(of: id) ?? "\(plan.entity.name)/\(id)"
    }

    /// The wire objects of the index rows `ids` (those that exist): read from
    /// `store`, or the groups' dictionaries held in memory.
    func objects(_ ids: [Int64], store: Store) throws(RPCError) -> [Int64: JSONValue] {
        guard let grouped else { return try store.objects(rows: ids, shape: shape) }
        return Dictionary(uniqueKeysWithValues: ids.map { ($0, grouped.dictionary(of: $0)) })
    }

    /// The set as a cache entry on disk.
    var cacheEntry: ResultsCacheEntry {
        ResultsCacheEntry(
            requestKey: key.string, transaction: transaction,
            rows: index.allEntries.map { KeyedRow(id: $0.id, key: $0.key) })
    }

    /// The section list for the wire (the window's, for a window).
    var sectionInfos: [SectionInfo] {
        guard window == nil else {
            let visible = visibleEntries()
            if !sectioned { return [SectionInfo(name: "", indexTitle: "", count: visible.count)] }
            return Self.sections(of: visible).map { Self.info($0.value, count: $0.count) }
        }
        if !sectioned { return [SectionInfo(name: "", indexTitle: "", count: index.count)] }
        return sections.map { Self.info($0.value, count: $0.count) }
    }

    // MARK: What subscribers see

    /// Positions in the index that subscribers see.
    private var visibleRange: Range<Int> {
        guard let window else { return 0..<index.count }
        let start = min(window.offset, index.count)
        return start..<(window.limit.map { min(index.count, start + $0) } ?? index.count)
    }

    /// How many objects subscribers see.
    var visibleCount: Int { visibleRange.count }

    /// The entries subscribers see at `positions` (relative to the window), clamped.
    func visibleEntries(in positions: Range<Int>? = nil) -> [OrderedIndex.Entry] {
        let range = visibleRange
        guard let positions else { return index.entries(in: range) }
        let lower = min(range.upperBound, range.lowerBound + max(0, positions.lowerBound))
        let upper = min(range.upperBound, range.lowerBound + max(0, positions.upperBound))
        return lower < upper ? index.entries(in: lower..<upper) : []
    }

    /// The sections subscribers see, with their counts (one unnamed section when not sectioned).
    var visibleSections: [(value: SortValue, count: Int)] {
        guard sectioned else { return [(.null, visibleCount)] }
        return window == nil ? sections : Self.sections(of: visibleEntries())
    }

    /// Where subscribers see row `id` (a flat position), or `nil` when they do not.
    func visiblePosition(of id: Int64) -> Int? {
        guard let rank = index.rank(of: id) else { return nil }
        let range = visibleRange
        return range.contains(rank) ? rank - range.lowerBound : nil
    }

    /// Consecutive section values of `entries` with their counts.
    private static func sections(of entries: [OrderedIndex.Entry]) -> [(value: SortValue, count: Int)] {
        var result: [(value: SortValue, count: Int)] = []
        for entry in entries {
            if let last = result.last, last.value.compare(entry.key.first) == 0 {
                result[result.count - 1].count += 1
            } else {
                result.append((entry.key.first, 1))
            }
        }
        return result
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
    /// longer matches or exists) and returns the changes subscribers see: in
    /// index paths of the whole results, or of the window.
    ///
    /// - Parameter touched: the keys the transaction changed per row (for updates).
    ///
    /// A window that holds a prefix of the results (``capacity``) takes in only
    /// rows that order before its last held row (the others may have matches
    /// ahead of them that it does not hold), lets go of rows past its capacity,
    /// and calls `refill` (the first `capacity` rows of the results, read with
    /// `LIMIT`) when fewer rows than the window's end remain.
    func apply(
        _ candidates: [Int64: SortKey?], touched: [Int64: Set<String>],
        refill: () throws(RPCError) -> [KeyedRow] = { () throws(RPCError) -> [KeyedRow] in
            throw RPCError.internalError("no store to refill the window")
        }
    ) throws(RPCError) -> Delta {
        // Most sets a commit reaches keep none of its rows (a save to one row, a hundred sets).
        guard !candidates.isEmpty else { return Delta() }
        guard let window else { return applyToAll(candidates, touched: touched) }
        let before = visibleEntries()
        let full = applyToAll(truncated ? heldOnly(candidates) : candidates, touched: touched)
        trim()
        // Rows pulled in from beyond the edge are inserts of the window's delta.
        let refilled = truncated && index.count < window.offset + (window.limit ?? 0)
        if refilled { reset(rows: try refill(), transaction: transaction) }
        guard !full.isEmpty || refilled else { return full }
        return windowDelta(from: before, to: visibleEntries(), full: full)
    }

    /// The first ``capacity`` rows of the results in `store` (a window's refill: an indexed read).
    func firstRows(in store: Store?) throws(RPCError) -> [KeyedRow] {
        guard let store else { throw RPCError.internalError("no snapshot was taken to refill the window") }
        var rows: [KeyedRow] = []
        _ = try store.keyedRows(plan, first: capacity, expectedCount: { _ in }) { rows.append($0) }
        return rows
    }

    /// `candidates` as a window holding a prefix sees them: a row whose new key orders after the
    /// last row held leaves (or does not enter) the held rows.
    private func heldOnly(_ candidates: [Int64: SortKey?]) -> [Int64: SortKey?] {
        guard let edge = index.count > 0 ? index.entries(in: index.count - 1..<index.count).first : nil else {
            return candidates.mapValues { _ in nil }
        }
        var held = candidates
        for case (let id, let key?) in candidates where index.less(edge, OrderedIndex.Entry(key: key, id: id)) {
            held.updateValue(nil, forKey: id)
        }
        return held
    }

    /// Lets go of the rows past ``capacity``.
    private func trim() {
        guard let capacity, index.count > capacity else { return }
        for entry in index.entries(in: capacity..<index.count) {
            index.remove(entry.id)
            adjustSection(entry.key.first, by: -1)
        }
        if sectioned { sections.removeAll { $0.count == 0 } }
        truncated = true
    }

    /// The window's delta: what left the window is a delete, what entered an
    /// insert (an object pushed in or out by a change elsewhere included), and
    /// what stayed keeps the whole delta's move or update. Objects that stayed
    /// untouched keep their relative order, so the apply rule holds.
    private func windowDelta(from before: [OrderedIndex.Entry], to after: [OrderedIndex.Entry], full: Delta) -> Delta {
        let oldSections = sectioned ? Self.sections(of: before) : [(SortValue.null, before.count)]
        let newSections = sectioned ? Self.sections(of: after) : [(SortValue.null, after.count)]
        func paths(_ entries: [OrderedIndex.Entry], _ sections: [(value: SortValue, count: Int)]) -> [Int64: [Int]] {
            Dictionary(
                uniqueKeysWithValues: entries.enumerated().map { ($1.id, SectionPaths.path($0, in: sections)) })
        }
        let oldPaths = paths(before, oldSections)
        let newPaths = paths(after, newSections)
        var kinds: [Int64: ObjectChange.Kind] = [:]
        for change in full.objects { kinds[change.id] = change.type }
        var delta = Delta()
        if sectioned {
            for (position, section) in oldSections.enumerated()
            where !newSections.contains(where: { $0.value.compare(section.value) == 0 }) {
                delta.sections.append(SectionChange(type: .delete, index: position, name: section.value.sectionName))
            }
            for (position, section) in newSections.enumerated()
            where !oldSections.contains(where: { $0.value.compare(section.value) == 0 }) {
                delta.sections.append(SectionChange(type: .insert, index: position, name: section.value.sectionName))
            }
        }
        for entry in before {
            guard let old = oldPaths[entry.id] else { continue }
            if let new = newPaths[entry.id] {
                switch kinds[entry.id] {
                // A row that moved past the held edge and came back with a refill moved.
                case .move?, .delete?: delta.objects.append((.move, entry.id, old, new))
                case .update?: delta.objects.append((.update, entry.id, old, new))
                default: break
                }
            } else {
                delta.objects.append((.delete, entry.id, old, nil))
            }
        }
        for entry in after where oldPaths[entry.id] == nil {
            delta.objects.append((.insert, entry.id, nil, newPaths[entry.id]))
        }
        return delta
    }

    /// ``apply(_:touched:)`` over the whole results.
    private func applyToAll(_ candidates: [Int64: SortKey?], touched: [Int64: Set<String>]) -> Delta {
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
