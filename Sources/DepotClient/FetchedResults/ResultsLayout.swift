import DepotProtocol
import Foundation

/// The shape of fetched results: sections of object ids, as of one `seq` of
/// a subscription. It applies `results/didChange` notifications by the rules
/// of DESIGN.md §7 and checks each one against what it holds.
///
/// ``FetchedResultsController`` keeps one; use it directly to mirror a
/// subscription without the controller.
public struct ResultsLayout: Hashable, Sendable {
    /// One section: its name, index title and ids in order.
    public struct Section: Hashable, Sendable {
        /// The section key's value as text (`""` for nil).
        public var name: String
        /// The name's capitalised first letter.
        public var indexTitle: String
        /// The ids in the section, in order.
        public var ids: [String]

        /// Creates a section.
        public init(name: String, indexTitle: String? = nil, ids: [String] = []) {
            self.name = name
            self.indexTitle = indexTitle ?? ResultsLayout.indexTitle(forSectionName: name)
            self.ids = ids
        }

        /// Equal when the names' and titles' bytes and the ids are (two spellings of a
        /// name are two sections, as in the daemon).
        public static func == (lhs: Section, rhs: Section) -> Bool {
            lhs.name.bytesEqual(rhs.name) && lhs.indexTitle.bytesEqual(rhs.indexTitle) && lhs.ids == rhs.ids
        }

        /// Hashes the name's bytes and the ids.
        public func hash(into hasher: inout Hasher) {
            ByteString.hash(name, into: &hasher)
            hasher.combine(ids)
        }
    }

    /// The sections, in order.
    public var sections: [Section]
    /// The `seq` of the last notification applied (0 right after subscribing).
    public var seq: Int64

    /// Creates a layout.
    public init(seq: Int64 = 0, sections: [Section] = []) {
        self.seq = seq
        self.sections = sections
    }

    /// A layout from a `results/snapshot`: the flat ids cut into the sections by their counts.
    public init(snapshot: ResultsSnapshot.Result) throws(ResultsLayoutError) {
        guard snapshot.sections.reduce(0, { $0 + $1.count }) == snapshot.ids.count else {
            throw .inconsistent(
                "the snapshot's sections count \(snapshot.sections.reduce(0) { $0 + $1.count }) objects but it has \(snapshot.ids.count) ids"
            )
        }
        var offset = 0
        var sections: [Section] = []
        for info in snapshot.sections {
            sections.append(
                Section(
                    name: info.name, indexTitle: info.indexTitle, ids: Array(snapshot.ids[offset..<offset + info.count])
                ))
            offset += info.count
        }
        self.init(seq: snapshot.seq, sections: sections)
    }

    /// Every id, in order.
    public var ids: [String] { sections.flatMap(\.ids) }

    /// The number of objects.
    public var count: Int { sections.reduce(0) { $0 + $1.ids.count } }

    /// The id at `indexPath`, or `nil` when it is out of range.
    public func id(at indexPath: IndexPath) -> String? {
        guard indexPath.count == 2, sections.indices.contains(indexPath[0]) else { return nil }
        let ids = sections[indexPath[0]].ids
        return ids.indices.contains(indexPath[1]) ? ids[indexPath[1]] : nil
    }

    /// The flat position of `indexPath` (its offset counting every earlier section's objects).
    public func offset(of indexPath: IndexPath) -> Int {
        sections.prefix(indexPath[0]).reduce(0) { $0 + $1.ids.count } + indexPath[1]
    }

    /// The index path of the flat position `offset`.
    public func indexPath(atOffset offset: Int) -> IndexPath? {
        var remaining = offset
        for (index, section) in sections.enumerated() {
            if remaining < section.ids.count { return IndexPath(indexes: [index, remaining]) }
            remaining -= section.ids.count
        }
        return nil
    }

    /// Core Data's default index title: the name's first letter, capitalised.
    public static func indexTitle(forSectionName name: String) -> String {
        name.first.map { String($0).uppercased() } ?? ""
    }

    /// Applies one `results/didChange`: removes deleted and moved objects
    /// (descending old index paths), removes deleted sections (descending),
    /// inserts inserted sections (ascending, empty), inserts inserted and moved
    /// objects (ascending new index paths), and checks updates' positions.
    ///
    /// - Throws: ``ResultsLayoutError/gap(expected:received:)`` when `seq` is not
    ///   the next one, ``ResultsLayoutError/inconsistent(_:)`` when a change does
    ///   not fit the layout (then resync). The layout is unchanged when it throws.
    public mutating func apply(_ change: ResultsDidChange.Parameters) throws(ResultsLayoutError) {
        guard change.seq == seq + 1 else { throw .gap(expected: seq + 1, received: change.seq) }
        var next = self
        try next.applyChanges(sectionChanges: change.sections, objectChanges: change.objects)
        next.seq = change.seq
        self = next
    }

    private mutating func applyChanges(sectionChanges: [SectionChange], objectChanges: [ObjectChange])
        throws(ResultsLayoutError)
    {
        let removals = try objectChanges.filter { $0.type == .delete || $0.type == .move }.map {
            change throws(ResultsLayoutError) in
            guard let path = IndexPath(wire: change.indexPath) else {
                throw .inconsistent("\(change.type.rawValue) of \(change.id) has no indexPath")
            }
            return (path, change.id)
        }
        for (path, id) in removals.sorted(by: { $0.0 > $1.0 }) {
            guard self.id(at: path) == id else {
                throw .inconsistent("\(id) is not at \(Array(path)) (found \(self.id(at: path) ?? "nothing"))")
            }
            sections[path[0]].ids.remove(at: path[1])
        }
        for change in sectionChanges.filter({ $0.type == .delete }).sorted(by: { $0.index > $1.index }) {
            guard sections.indices.contains(change.index), sections[change.index].name.bytesEqual(change.name) else {
                throw .inconsistent("no section '\(change.name)' at \(change.index) to delete")
            }
            guard sections[change.index].ids.isEmpty else {
                throw .inconsistent(
                    "section '\(change.name)' still has \(sections[change.index].ids.count) objects when deleted")
            }
            sections.remove(at: change.index)
        }
        for change in sectionChanges.filter({ $0.type == .insert }).sorted(by: { $0.index < $1.index }) {
            guard change.index <= sections.count else {
                throw .inconsistent(
                    "section '\(change.name)' inserted at \(change.index) past the end (\(sections.count))")
            }
            sections.insert(Section(name: change.name), at: change.index)
        }
        let insertions = try objectChanges.filter { $0.type == .insert || $0.type == .move }.map {
            change throws(ResultsLayoutError) in
            guard let path = IndexPath(wire: change.newIndexPath) else {
                throw .inconsistent("\(change.type.rawValue) of \(change.id) has no newIndexPath")
            }
            return (path, change.id)
        }
        for (path, id) in insertions.sorted(by: { $0.0 < $1.0 }) {
            guard sections.indices.contains(path[0]), path[1] <= sections[path[0]].ids.count else {
                throw .inconsistent("\(id) inserted at \(Array(path)) out of range")
            }
            sections[path[0]].ids.insert(id, at: path[1])
        }
        for change in objectChanges where change.type == .update {
            guard let path = IndexPath(wire: change.newIndexPath ?? change.indexPath), self.id(at: path) == change.id
            else {
                throw .inconsistent("updated \(change.id) is not at \(change.newIndexPath ?? change.indexPath ?? [])")
            }
        }
    }
}

/// Why a ``ResultsLayout`` could not apply a notification; the cure is a resync.
public enum ResultsLayoutError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The notification's `seq` is not the next one: some were missed.
    case gap(expected: Int64, received: Int64)
    /// The notification does not fit the layout.
    case inconsistent(String)

    public var description: String {
        switch self {
        case .gap(let expected, let received): "expected seq \(expected), received \(received)"
        case .inconsistent(let detail): "inconsistent change: \(detail)"
        }
    }
}
