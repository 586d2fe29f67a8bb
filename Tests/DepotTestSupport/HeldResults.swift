import DepotProtocol

/// One live subscription as a client holds it: its section names and rows, and
/// the related objects of a prefetching request, with `results/didChange`
/// applied by DESIGN.md §7's rule and compared by bytes. The delta oracle of the
/// property tests: applied deltas must give exactly a fresh fetch.
public struct HeldResults {
    /// The subscription's id.
    public var subscription: String
    /// The last `seq` applied.
    public var seq: Int64 = 0
    /// The section names.
    public var names: [String]
    /// The rows (their id and object) by section.
    public var sections: [[(id: String, object: JSONValue)]]
    /// The related objects by id (a prefetching request's `related`).
    public var related: [String: JSONValue]

    /// The subscribe answer (with `include: all`) as held; `id` names a row of it
    /// (by default its `id`).
    public init(answer: JSONValue, id: (JSONValue) -> String = { $0["id"]?.stringValue ?? "" }) {
        subscription = answer["subscription"]?.stringValue ?? ""
        names = answer["sections"]?.arrayValue?.map { $0["name"]?.stringValue ?? "" } ?? []
        related = answer["related"]?.objectValue ?? [:]
        let objects = answer["objects"]?.arrayValue ?? []
        var offset = 0
        sections = []
        for section in answer["sections"]?.arrayValue ?? [] {
            let count = Int(section["count"]?.intValue ?? 0)
            sections.append(objects[offset..<min(offset + count, objects.count)].map { (id($0), $0) })
            offset += count
        }
    }

    /// One unnamed section of `objects` (an unsectioned fetch's answer), none applied yet.
    public init(subscription: String = "", objects: [JSONValue]) {
        self.subscription = subscription
        names = [""]
        related = [:]
        sections = [objects.map { ($0["id"]?.stringValue ?? "", $0) }]
    }

    /// Every object held, in order.
    public var objects: [JSONValue] { sections.flatMap { $0.map(\.object) } }

    /// Applies this subscription's `results/didChange` notifications among `messages` (a session's
    /// messages, oldest first) that come after ``seq``, handing each applied one's params to `each`;
    /// returns the first problem, or nil.
    public mutating func catchUp(with messages: [JSONValue], each: (JSONValue) -> Void = { _ in }) -> String? {
        for message in messages where message["method"] == "results/didChange" {
            guard let change = message["params"], change["subscription"]?.stringValue == subscription,
                let number = change["seq"]?.intValue, number > seq
            else { continue }
            if let problem = apply(change) { return problem }
            each(change)
        }
        return nil
    }

    /// Applies one `results/didChange` params; returns a problem, or nil.
    public mutating func apply(_ change: JSONValue) -> String? {
        guard change["seq"]?.intValue == seq + 1 else { return "seq \(String(describing: change["seq"])) after \(seq)" }
        seq += 1
        let objects = change["objects"]?.arrayValue ?? []
        let sectionChanges = change["sections"]?.arrayValue ?? []
        func path(_ object: JSONValue, _ key: String) -> (Int, Int)? {
            guard let path = object[key]?.arrayValue?.compactMap(\.intValue).map(Int.init), path.count == 2 else {
                return nil
            }
            return (path[0], path[1])
        }
        let removed = objects.filter { $0["type"] == "delete" || $0["type"] == "move" }.compactMap {
            path($0, "indexPath")
        }
        for (section, row) in removed.sorted(by: { $0 > $1 }) {
            guard sections.indices.contains(section), sections[section].indices.contains(row) else {
                return "no row at [\(section), \(row)]"
            }
            sections[section].remove(at: row)
        }
        let deletedSections = sectionChanges.filter { $0["type"] == "delete" }
        for section in deletedSections.sorted(by: { ($0["index"]?.intValue ?? 0) > ($1["index"]?.intValue ?? 0) }) {
            let index = Int(section["index"]?.intValue ?? -1)
            guard sections.indices.contains(index), sections[index].isEmpty,
                names[index].bytesEqual(section["name"]?.stringValue ?? "")
            else { return "section delete \(LookAlikeText.visible(section)) of \(names.map(LookAlikeText.visible))" }
            sections.remove(at: index)
            names.remove(at: index)
        }
        let insertedSections = sectionChanges.filter { $0["type"] == "insert" }
        for section in insertedSections.sorted(by: { ($0["index"]?.intValue ?? 0) < ($1["index"]?.intValue ?? 0) }) {
            let index = Int(section["index"]?.intValue ?? -1)
            guard index >= 0, index <= sections.count else { return "section insert at \(index)" }
            sections.insert([], at: index)
            names.insert(section["name"]?.stringValue ?? "", at: index)
        }
        let inserted = objects.filter { $0["type"] == "insert" || $0["type"] == "move" }
        for object in inserted.sorted(by: {
            (path($0, "newIndexPath") ?? (0, 0)) < (path($1, "newIndexPath") ?? (0, 0))
        }) {
            guard let (section, row) = path(object, "newIndexPath"), sections.indices.contains(section),
                row <= sections[section].count
            else { return "no place for \(LookAlikeText.visible(object))" }
            sections[section].insert((object["id"]?.stringValue ?? "", object["object"] ?? .null), at: row)
        }
        for object in objects where object["type"] == "update" || object["type"] == "move" {
            guard let (section, row) = path(object, "newIndexPath"), sections.indices.contains(section),
                sections[section].indices.contains(row)
            else { return "no row to update for \(LookAlikeText.visible(object))" }
            guard sections[section][row].id == object["id"]?.stringValue ?? "" else {
                return "update of \(object["id"] ?? .null) lands on \(sections[section][row].id)"
            }
            if let value = object["object"] { sections[section][row].object = value }
        }
        for (id, object) in change["related"]?.objectValue ?? [:] { related[id] = object }
        for id in change["relatedRemoved"]?.arrayValue ?? [] {
            if let id = id.stringValue { related[id] = nil }
        }
        return nil
    }
}
