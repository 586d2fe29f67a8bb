import DepotProtocol
import DepotStore

/// The answer to a resumed `results/subscribe` (DESIGN.md §7, Resuming): the
/// rows of a set that may have moved, entered, left or changed since the
/// transaction a client's results reflect, each with its index path now.
///
/// Rows not named kept their relative order since then, so a client rebuilds
/// the current list from what it holds: it drops the named ids, puts back the
/// present ones where the answer says, and checks the answer's digest. The
/// named rows come from history, never from the set's whole list:
/// - objects: the rows history changed, plus rows reached through
///   relationships from changed objects (``DeltaComputer/candidateRows``);
/// - groups: the groups that changed members are in now, when history
///   tells each changed member's group then (an insert, or an update that
///   left its groupBy keys alone); otherwise ``named(_:since:store:)`` asks
///   for a full answer;
/// - windows: besides, the rows near the window's edges that changed rows
///   may have pushed in or out (at most twice the changed rows on each edge).
enum ResultsResumption {
    /// The index rows of `set` to name for a client that holds its results as of `since`,
    /// read from `store` (the state `set` reflects); `nil` when only a full answer is right:
    /// history no longer reaches back, `since` is ahead of the store, or a grouped set's
    /// changed rows left groups that history cannot tell.
    static func named(_ set: ResultSet, since: Int64, store: Store) throws(RPCError) -> Set<Int64>? {
        guard let changes = try store.changes(since: since) else { return nil }
        var named: Set<Int64>
        if let grouped = set.grouped {
            guard let groups = try touchedGroups(grouped, set: set, changes: changes) else { return nil }
            named = groups
        } else {
            // A resume's reads, not a commit's publishing: not counted in server/stats.
            var uncounted = ServerStats.StoreReads()
            named = try DeltaComputer.candidateRows(
                entity: set.plan.entity, dependencies: set.dependencies, changedRows: changes.rows, store: store,
                reads: &uncounted)
        }
        if let window = set.window, !named.isEmpty {
            named.formUnion(edges(of: set, window: window, changed: named.count))
        }
        return named
    }

    /// The groups a grouped set's changed members are in now; `nil` when a changed member's
    /// group then is unknown (it was deleted, its groupBy keys changed, it no longer matches,
    /// or a change reached the groups through a relationship).
    private static func touchedGroups(_ grouped: GroupedResults, set: ResultSet, changes: ChangesSince) throws(RPCError)
        -> Set<Int64>?
    {
        let entity = set.plan.entity.name
        for dependency in set.dependencies where !(changes.rows[dependency.entity] ?? []).isEmpty { return nil }
        let groupKeys = Set(grouped.plan.memberKeyPaths.prefix(grouped.plan.shape.groupKeyCount).map(Self.firstKey))
        let inserted = changes.inserted[entity] ?? []
        let deleted = changes.deleted[entity] ?? []
        let keys = changes.keys[entity] ?? [:]
        var slots: Set<Int64> = []
        for row in changes.rows[entity] ?? [] {
            let isNew = inserted.contains(row)
            if !isNew {
                // Then in a group that history cannot name.
                if deleted.contains(row) { return nil }
                if let changed = keys[row], changed.contains(where: { groupKeys.contains($0) }) { return nil }
            }
            if let slot = grouped.slot(ofMember: row) {
                slots.insert(slot)
            } else if !isNew {
                return nil
            }
        }
        return slots
    }

    /// The key a key path starts with (what history names for a change reaching it).
    private static func firstKey(_ path: String) -> String {
        String(path.split(separator: ".", maxSplits: 1).first ?? Substring(path))
    }

    /// The rows near `window`'s edges that `changed` rows may have moved across them: a row
    /// that did not change has the same rank among unchanged rows then and now, and at most
    /// `changed` changed rows before it either time.
    private static func edges(of set: ResultSet, window: ResultSet.Window, changed: Int) -> Set<Int64> {
        let count = set.index.count
        var bounds = [window.offset]
        if let limit = window.limit { bounds.append(window.offset + limit) }
        var rows: Set<Int64> = []
        for bound in bounds {
            let lower = min(count, max(0, bound - changed))
            let upper = min(count, max(0, bound + changed))
            guard lower < upper else { continue }
            for entry in set.index.entries(in: lower..<upper) { rows.insert(entry.id) }
        }
        return rows
    }

    /// The answer's rows for `named`: each with its index path in what subscribers see (none
    /// when outside it) and, as `include` says, its object; present rows first, in order.
    static func rows(
        _ named: Set<Int64>, of set: ResultSet, include: ResultsInclude, firstBatch: Int, store: Store
    ) throws(RPCError) -> [ResumedRow] {
        var present: [(position: Int, id: Int64)] = []
        var gone: [Int64] = []
        for id in named {
            if let position = set.visiblePosition(of: id) { present.append((position, id)) } else { gone.append(id) }
        }
        present.sort { $0.position < $1.position }
        let sendsObject: (Int) -> Bool =
            switch include {
            case .all: { _ in true }
            case .noObjects: { _ in false }
            case .firstBatch: { $0 < firstBatch }
            }
        let withObjects = present.filter { sendsObject($0.position) }.map(\.id)
        let objects = withObjects.isEmpty ? [:] : try set.objects(withObjects, store: store)
        // Section starts, to turn flat positions into index paths.
        var starts: [Int] = []
        var total = 0
        for section in set.visibleSections {
            starts.append(total)
            total += section.count
        }
        var rows: [ResumedRow] = []
        rows.reserveCapacity(named.count)
        for (position, id) in present {
            var low = 0
            var high = starts.count - 1
            while low < high {
                let middle = (low + high + 1) / 2
                if starts[middle] <= position { low = middle } else { high = middle - 1 }
            }
            rows.append(
                ResumedRow(id: set.wireID(of: id), indexPath: [low, position - starts[low]], object: objects[id]))
        }
        for id in gone.sorted() { rows.append(ResumedRow(id: set.wireID(of: id))) }
        return rows
    }

    /// The digest of the ids subscribers see now.
    static func digest(of set: ResultSet) -> String {
        ResultsDigest.of(set.visibleEntries().lazy.map { set.wireID(of: $0.id) })
    }
}
