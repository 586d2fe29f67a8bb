import DepotProtocol

/// Strings that Swift's `String ==` (canonical equivalence) or a careless fold
/// takes for one another, and that Depot keeps apart as their UTF-8 bytes do
/// (DESIGN.md §4): the look-alike tests and the fuzz target draw from them.
public enum LookAlikeText {
    /// Sets of look-alikes: canonically equivalent spellings (composed and decomposed
    /// accents; Å, A + ring, the Ångström sign; K and the Kelvin sign), compatibility
    /// look-alikes (the ﬁ ligature and fi), case, and trailing spaces.
    public static let families: [[String]] = [
        ["jos\u{E9}", "jose\u{301}", "Jos\u{E9}", "JOS\u{C9}", "jose", "jos\u{E9} "],
        ["\u{C5}", "A\u{30A}", "\u{212B}", "\u{E5}", "a\u{30A}", "A"],
        ["\u{FB01}", "fi", "Fi", "FI", "fi "],
        ["K", "\u{212A}", "k"],
        ["\u{E9}", "e\u{301}", "e", "\u{301}", "\u{301}e"],
    ]

    /// Every look-alike, each once.
    public static let all: [String] = families.flatMap { $0 }

    /// A look-alike drawn from `random`.
    public static func random(_ random: inout SeededGenerator) -> String {
        all.randomElement(using: &random)!
    }

    /// `text` with every non-ASCII scalar written `\u{…}`, for failure messages
    /// (two spellings print alike otherwise).
    public static func visible(_ text: String) -> String {
        text.unicodeScalars.map { $0.isASCII ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined()
    }

    /// Live group rows as a grouped fetch answers them: each live row carries its `id`
    /// (`group:` + the JSON array of its groupBy values, DESIGN.md §7), a fetched one does not.
    public static func withoutGroupIDs(_ rows: [JSONValue]) -> [JSONValue] {
        rows.map { row in
            guard case .object(var members) = row, members["id"]?.stringValue?.hasPrefix("group:") == true else {
                return row
            }
            members["id"] = nil
            return .object(members)
        }
    }

    /// `value` as a JSON text whose non-ASCII strings read apart (for failure messages).
    public static func visible(_ value: JSONValue) -> String {
        visible(String(decoding: JSONWriter.encode(value), as: UTF8.self))
    }
}

/// One live subscription as a client holds it: its section names and rows, with
/// `results/didChange` applied by DESIGN.md §7's rule, compared by bytes.
public struct HeldResults {
    /// The subscription id.
    public var subscription: String
    /// The last `seq` applied.
    public var seq: Int64 = 0
    /// The section names.
    public var names: [String]
    /// The rows (their id and object) by section.
    public var sections: [[(id: String, object: JSONValue)]]

    /// The subscribe answer (with `include: all`) as held; `id` names a row of it.
    public init(answer: JSONValue, id: (JSONValue) -> String) {
        subscription = answer["subscription"]?.stringValue ?? ""
        names = answer["sections"]?.arrayValue?.map { $0["name"]?.stringValue ?? "" } ?? []
        let objects = answer["objects"]?.arrayValue ?? []
        var offset = 0
        sections = []
        for section in answer["sections"]?.arrayValue ?? [] {
            let count = Int(section["count"]?.intValue ?? 0)
            sections.append(objects[offset..<min(offset + count, objects.count)].map { (id($0), $0) })
            offset += count
        }
    }

    /// Every object held, in order.
    public var objects: [JSONValue] { sections.flatMap { $0.map(\.object) } }

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
        return nil
    }
}
