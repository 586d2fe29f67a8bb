import DepotProtocol
import DepotStore

/// The live relationships of one prefetching result set (DESIGN.md §7, Live
/// relationships): which related ids each row subscribers see links to, and
/// the reverse index from a related id to those rows. Ids only, never objects:
/// a related object's values are read when a notification carries it.
///
/// A commit reaches the set through the reverse index: each changed object
/// that a row links to makes that row an `update` (its graph changed), and the
/// rows a notification carries have their links read again. What no row links
/// to any more (or the key's scope now hides) is announced in `relatedRemoved`.
///
/// Like ``ResultSet``, touched only in publish-lane jobs (or by the reader
/// building its set before a lane job installs it).
final class RelatedGraph: @unchecked Sendable {
    /// The request's prefetch key paths.
    let plan: PrefetchPlan
    /// The key's read scopes of the entities the paths reach.
    let scopes: [String: PredicateNode]?
    /// The relationship key every row carries first: a graph-only change is an update of it.
    let rowKey: String
    /// Whether the links reflect the rows subscribers see.
    private(set) var isBuilt = false
    /// The related ids each visible row links to (those the scope hides included).
    /// (An array: a row links to few ids, and a set per row costs several times its bytes.)
    private var links: [Int64: [String]] = [:]
    /// The visible rows linking to each related id.
    private var linkedBy: [String: Set<Int64>] = [:]
    /// The linked ids the key's scope lets it read.
    private var visible: Set<String> = []
    /// Ids that left the client's graph since the last notification (candidates for `relatedRemoved`).
    private var leaving: Set<String> = []
    /// Ids new to the client or changed since the last notification: `related` carries them.
    private var dirty: Set<String> = []
    /// Rows whose links were read since the last notification: `related` carries all they reach.
    private var refreshed: Set<Int64> = []

    init?(plan: FetchPlan, scopes: [String: PredicateNode]?) {
        guard let prefetch = plan.prefetch, let first = prefetch.rowKeys.first else { return nil }
        self.plan = prefetch
        self.scopes = scopes
        rowKey = first
    }

    /// How many related ids the rows link to, and links held (for the memory figures).
    var size: (related: Int, links: Int) { (linkedBy.count, links.values.reduce(0) { $0 + $1.count }) }

    /// Reads the links of `rows` (the rows subscribers see) afresh.
    func build(rows: [Int64], store: Store) throws(RPCError) {
        links = [:]
        linkedBy = [:]
        visible = []
        leaving = []
        try refresh(rows, store: store)
        // The subscribe answer (or the resync) carries every reached object.
        dirty = []
        refreshed = []
        isBuilt = true
    }

    /// The visible rows linking to an object the transaction changed: their graph changed.
    func rowsReaching(_ changedRows: [String: Set<Int64>]) -> Set<Int64> {
        var rows: Set<Int64> = []
        for entity in plan.destinations {
            guard let changed = changedRows[entity] else { continue }
            for row in changed {
                if let reaching = linkedBy["\(entity)/\(row)"] { rows.formUnion(reaching) }
            }
        }
        return rows
    }

    /// After a delta: the rows it deletes (from what subscribers see) drop their
    /// links; the rows it inserts, moves or updates have theirs read again, but for
    /// the rows it moves or updates in `kept` (whose links the transaction cannot have changed).
    /// The reached objects among `changed` (the transaction's changed rows by entity; `nil`: not
    /// known, so every reached object) go out with the next notification.
    func follow(
        _ delta: ResultSet.Delta, store: Store, keeping kept: Set<Int64> = [], changed: [String: Set<Int64>]?
    ) throws(RPCError) {
        defer {
            if let changed {
                for entity in plan.destinations {
                    for row in changed[entity] ?? [] where linkedBy["\(entity)/\(row)"] != nil {
                        dirty.insert("\(entity)/\(row)")
                    }
                }
            } else {
                dirty.formUnion(visible)
            }
        }
        var dropped: [Int64] = []
        var reread: [Int64] = []
        for change in delta.objects {
            if change.type == .delete {
                dropped.append(change.id)
            } else if change.type == .insert || !kept.contains(change.id) || links[change.id] == nil {
                reread.append(change.id)
            }
        }
        for row in dropped { unlink(row) }
        try refresh(reread, store: store)
    }

    /// Reads the links of `rows` again and files them.
    private func refresh(_ rows: [Int64], store: Store) throws(RPCError) {
        guard !rows.isEmpty else { return }
        refreshed.formUnion(rows)
        for row in rows { unlink(row) }
        let graph = try store.prefetch(plan, rows: rows, scopes: scopes, reach: true)
        let shown = Set(graph.ids)
        for (row, ids) in graph.reach {
            links[row] = ids
            for id in ids {
                linkedBy[id, default: []].insert(row)
                // Visibility belongs to the object: every row linking to an object that changed is read again.
                if shown.contains(id) {
                    // New to the client, unless it only left since the last notification (it still holds it).
                    if visible.insert(id).inserted, !leaving.contains(id) { dirty.insert(id) }
                } else if visible.remove(id) != nil {
                    leaving.insert(id)
                }
            }
        }
    }

    /// Forgets the links of `row`; ids no visible row links to any more leave the client's graph.
    private func unlink(_ row: Int64) {
        guard let ids = links.removeValue(forKey: row) else { return }
        for id in ids {
            if visible.contains(id) { leaving.insert(id) }
            linkedBy[id]?.remove(row)
            if linkedBy[id]?.isEmpty == true {
                linkedBy[id] = nil
                visible.remove(id)
            }
        }
    }

    /// The visible related ids `rows` link to.
    func reached(from rows: some Sequence<Int64>) -> Set<String> {
        var ids: Set<String> = []
        for row in rows {
            for id in links[row] ?? [] where visible.contains(id) { ids.insert(id) }
        }
        return ids
    }

    /// The ids that left the client's graph since the last call and are not back in it.
    func takeRemoved() -> [String] {
        defer { leaving = [] }
        return leaving.filter { linkedBy[$0] == nil || !visible.contains($0) }.sorted {
            $0.utf8.lexicographicallyPrecedes($1.utf8)
        }
    }

    /// `shared` (a `results/didChange`'s shared members, `{…}`) with `related`, read from
    /// `store`, and `relatedRemoved`. `related` holds every visible object reached by the rows
    /// whose links were read since the last notification (inserted, moved, changed or re-pointed
    /// rows: a client that faulted in only some rows still gets what these rows show), and the
    /// objects changed since then. A row updated only because an object it shows changed brings
    /// just that object.
    func decorate(_ shared: [UInt8], store: Store) throws(RPCError) -> [UInt8] {
        let ids = reached(from: refreshed).union(dirty.intersection(visible))
        let (json, _) = try store.relatedObjects(ids, plan: plan, scopes: scopes)
        (dirty, refreshed) = ([], [])
        let removed = takeRemoved()
        var writer = JSONWriter(capacity: shared.count + json.count + 64)
        writer.writeRaw(shared.dropLast())
        writer.writeRaw(",\"related\":{")
        writer.writeRaw(json)
        writer.writeRaw("}")
        if !removed.isEmpty {
            writer.writeRaw(",\"relatedRemoved\":")
            writer.write(JSONValue.array(removed.map { .string($0) }))
        }
        writer.writeRaw("}")
        return writer.bytes
    }

    /// `answer` (a JSON object's bytes) with `"related"` appended: the objects `rows` reach in `store`.
    static func appendRelated(
        to answer: [UInt8], rows: [Int64], plan: PrefetchPlan, scopes: [String: PredicateNode]?, store: Store
    ) throws(RPCError) -> [UInt8] {
        let graph = try store.prefetch(plan, rows: rows, scopes: scopes)
        return appendRelated(to: answer, graph: graph)
    }

    /// `answer` (a JSON object's bytes) with `"related"` appended.
    static func appendRelated(to answer: [UInt8], graph: PrefetchedGraph) -> [UInt8] {
        guard answer.last == UInt8(ascii: "}") else { return answer }
        return answer.dropLast() + Array(",\"related\":".utf8) + graph.relatedObject + [UInt8(ascii: "}")]
    }
}
