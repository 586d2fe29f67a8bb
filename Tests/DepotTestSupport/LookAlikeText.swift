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
