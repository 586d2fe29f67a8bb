import DepotClient
import DepotProtocol

/// A local copy of a subscription's sectioned results, kept current by applying
/// `results/didChange` deltas by the rule of DESIGN.md §7.
struct ResultsTable {
    /// One section: its name and its objects' ids in order.
    struct Section {
        var name: String
        var ids: [String]
    }

    /// A delta that does not fit the table; the watcher resyncs.
    struct Mismatch: Error, CustomStringConvertible {
        let description: String
    }

    private(set) var sections: [Section] = []
    private(set) var values: [String: JSONValue] = [:]
    private(set) var seq: Int64 = 0
    /// With `prefetch`: the objects the rows reach, by id (DESIGN.md §7, Live relationships).
    private(set) var related: [String: JSONValue] = [:]

    /// A table from section counts and the flat ordered objects (or ids, with `objects` giving values by id).
    init(
        sections infos: [SectionInfo], ids: [String], objects: [String: JSONValue], seq: Int64,
        related: [String: JSONValue] = [:]
    ) throws(Mismatch) {
        self.related = related
        var offset = 0
        for info in infos {
            guard offset + info.count <= ids.count else {
                throw Mismatch(description: "section counts exceed the \(ids.count) ids")
            }
            sections.append(Section(name: info.name, ids: Array(ids[offset..<offset + info.count])))
            offset += info.count
        }
        guard offset == ids.count else {
            throw Mismatch(description: "section counts cover \(offset) of \(ids.count) ids")
        }
        values = objects
        self.seq = seq
    }

    /// Every id, in order.
    var count: Int { sections.reduce(0) { $0 + $1.ids.count } }

    /// Applies one change: removals by descending old path, section deletes descending,
    /// section inserts ascending, insertions by ascending new path, then values.
    mutating func apply(_ change: ResultsDidChange.Parameters) throws(Mismatch) {
        var next = sections
        let removals = change.objects.filter { $0.type == .delete || $0.type == .move }
            .map { (path: $0.indexPath ?? [], id: $0.id) }
            .sorted { $0.path.lexicographicallyPrecedes($1.path) }.reversed()
        for removal in removals {
            guard removal.path.count == 2, next.indices.contains(removal.path[0]),
                next[removal.path[0]].ids.indices.contains(removal.path[1]),
                next[removal.path[0]].ids[removal.path[1]] == removal.id
            else { throw Mismatch(description: "\(removal.id) is not at \(removal.path)") }
            next[removal.path[0]].ids.remove(at: removal.path[1])
        }
        for delete in change.sections.filter({ $0.type == .delete }).sorted(by: { $0.index > $1.index }) {
            guard next.indices.contains(delete.index), next[delete.index].ids.isEmpty else {
                throw Mismatch(description: "section \(delete.index) cannot be deleted")
            }
            next.remove(at: delete.index)
        }
        for insert in change.sections.filter({ $0.type == .insert }).sorted(by: { $0.index < $1.index }) {
            guard insert.index <= next.count else {
                throw Mismatch(description: "section \(insert.index) is past the end")
            }
            next.insert(Section(name: insert.name, ids: []), at: insert.index)
        }
        let insertions = change.objects.filter { $0.type == .insert || $0.type == .move }
            .map { (path: $0.newIndexPath ?? [], id: $0.id) }
            .sorted { $0.path.lexicographicallyPrecedes($1.path) }
        for insertion in insertions {
            guard insertion.path.count == 2, next.indices.contains(insertion.path[0]),
                insertion.path[1] <= next[insertion.path[0]].ids.count
            else { throw Mismatch(description: "\(insertion.id) cannot go to \(insertion.path)") }
            next[insertion.path[0]].ids.insert(insertion.id, at: insertion.path[1])
        }
        for object in change.objects {
            if object.type == .delete {
                values[object.id] = nil
            } else if let value = object.object {
                values[object.id] = value
            }
        }
        related.merge(change.related ?? [:]) { _, new in new }
        for id in change.relatedRemoved ?? [] { related[id] = nil }
        sections = next
        seq = change.seq
    }

    /// Every id, in order.
    var ids: [String] { sections.flatMap(\.ids) }

    /// Takes a resumed `results/subscribe` answer (DESIGN.md §7, Resuming): rebuilds the ids
    /// from the rows it names (``ResultsLayout/init(resuming:with:)``), checks them against its
    /// digest, and takes the named rows' values; `id` names a row's object (a group's dictionary
    /// carries no id of its own). The table is unchanged when it throws: then resync in full.
    mutating func resume(with answer: ResultsSubscribe.Result, id: (JSONValue) -> String?) throws(Mismatch) {
        let held = ResultsLayout(sections: sections.map { ResultsLayout.Section(name: $0.name, ids: $0.ids) })
        let layout: ResultsLayout
        do {
            layout = try ResultsLayout(resuming: held, with: answer)
        } catch {
            throw Mismatch(description: "\(error)")
        }
        guard let digest = answer.digest, ResultsDigest.of(layout.ids) == digest else {
            throw Mismatch(description: "the rebuilt ids do not match the daemon's digest")
        }
        for row in answer.changed ?? [] {
            values[row.id] = nil
            if row.indexPath != nil, let object = row.object { values[id(object) ?? row.id] = object }
        }
        sections = layout.sections.map { Section(name: $0.name, ids: $0.ids) }
        seq = answer.seq
    }
}
