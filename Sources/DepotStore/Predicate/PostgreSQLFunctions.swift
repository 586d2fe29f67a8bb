import DepotProtocol
import Foundation

/// The SQL functions that predicates compiled for ``SQLDialect/postgresql`` call,
/// as statements the store runs in its schema when it creates it.
///
/// They are self-contained (no `unaccent` or ICU collation needed) and give the
/// answers of ``PredicateText``, which the in-memory evaluator and SQLite use:
///
/// - `depot_fold(text, flags)`: `[c]` (1), `[d]` (2) and `[cd]` (3) folding. The
///   mapping of every code point is generated from ``PredicateText/fold(_:_:)``
///   itself, so it is exact for each code point; `[d]` then drops the combining
///   marks (and the other code points Foundation drops after a letter) that
///   follow the first code point. Foundation keeps some marks in stacks of
///   several, and some emoji modifiers: there the two differ (docs/cluster.md).
/// - `depot_like(pattern)`: an NSPredicate `LIKE` pattern (`*`, `?`, `\`) as a
///   PostgreSQL `LIKE` pattern (`%`, `_`, `\`).
public enum PostgreSQLFunctions {
    /// `CREATE OR REPLACE FUNCTION` statements for `schema` (an unquoted name), to run in order.
    public static func statements(schema: String) -> [String] {
        let prefix = EntitySchema.quote(schema) + "."
        var fold = """
            CREATE OR REPLACE FUNCTION \(prefix)depot_fold(value text, flags integer) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $depot$
            SELECT CASE flags & 3
            """
        let stripped =
            "(left(value, 1) || regexp_replace(substr(value, 2), '\(PostgreSQLPattern.set(strippedAfterFirst, negated: false))', '', 'g'))"
        for flags in 1...3 {
            fold += "\nWHEN \(flags) THEN " + mapping(flags, of: flags & 2 != 0 ? stripped : "value")
        }
        fold += "\nELSE value END\n$depot$"
        let like = #"""
            CREATE OR REPLACE FUNCTION \#(prefix)depot_like(pattern text) RETURNS text
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $depot$
            DECLARE
                result text := '';
                escaped boolean := false;
                c text;
            BEGIN
                FOREACH c IN ARRAY regexp_split_to_array(pattern, '') LOOP
                    IF escaped THEN
                        result := result || CASE WHEN c IN ('%', '_', '\') THEN '\' || c ELSE c END;
                        escaped := false;
                    ELSIF c = '\' THEN
                        escaped := true;
                    ELSIF c = '*' THEN
                        result := result || '%';
                    ELSIF c = '?' THEN
                        result := result || '_';
                    ELSIF c IN ('%', '_') THEN
                        result := result || '\' || c;
                    ELSE
                        result := result || c;
                    END IF;
                END LOOP;
                IF escaped THEN
                    result := result || '\\';
                END IF;
                RETURN result;
            END
            $depot$
            """#
        return [fold, like]
    }

    /// `value` (SQL) with the code points that `flags` folds replaced by their folds.
    private static func mapping(_ flags: Int, of value: String) -> String {
        let table = foldTables[flags - 1]
        var from = ""
        var to = ""
        var multiple: [(UInt32, [UInt32])] = []
        for (source, target) in table.sorted(by: { $0.key < $1.key }) {
            if target.count == 1 {
                from.unicodeScalars.append(Unicode.Scalar(source)!)
                to.unicodeScalars.append(Unicode.Scalar(target[0])!)
            } else {
                multiple.append((source, target))
            }
        }
        // No fold's result is folded again (checked by the tests), so the order of the replacements is free.
        var sql = "translate(\(value), \(literal(from)), \(literal(to)))"
        for (source, target) in multiple {
            let replacement = String(String.UnicodeScalarView(target.compactMap(Unicode.Scalar.init)))
            sql = "replace(\(sql), \(literal(String(Unicode.Scalar(source)!))), \(literal(replacement)))"
        }
        return sql
    }

    /// A SQL string literal.
    private static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// The fold of every code point that `[c]`, `[d]` and `[cd]` change (indexes 0, 1, 2), as Foundation folds it alone.
    static let foldTables: [[UInt32: [UInt32]]] = {
        var tables: [[UInt32: [UInt32]]] = [[:], [:], [:]]
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value), isAssigned(scalar) else { continue }
            let text = String(scalar)
            for flags in 1...3 {
                let folded = PredicateText.fold(text, flags).unicodeScalars.map(\.value)
                if folded != [value] { tables[flags - 1][value] = folded }
            }
        }
        return tables
    }()

    /// The code points `[d]` drops after a letter (combining marks and a few others).
    static let strippedAfterFirst: [ClosedRange<UInt32>] = {
        let categories: Set<Unicode.GeneralCategory> = [
            .nonspacingMark, .spacingMark, .enclosingMark, .format, .modifierLetter, .modifierSymbol,
        ]
        var values: [UInt32] = []
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value), categories.contains(scalar.properties.generalCategory) else {
                continue
            }
            if PredicateText.fold("a" + String(scalar), 2).unicodeScalars.elementsEqual(["a"]) { values.append(value) }
        }
        return PostgreSQLPattern.ranges(values)
    }()

    /// The code points whose `[c]` fold is each single-code-point string (for MATCHES[c]).
    static let caseFoldSources: [String: [UInt32]] = {
        var sources: [String: [UInt32]] = [:]
        for (source, target) in foldTables[0] where target.count == 1 {
            sources[String(Unicode.Scalar(target[0])!), default: []].append(source)
        }
        return sources
    }()

    /// The `[c]` folds of several code points (`ss`), with the code points that fold to each (`ß`, `ẞ`).
    static let multipleCaseFoldSources: [[UInt32]: [UInt32]] = {
        var sources: [[UInt32]: [UInt32]] = [:]
        for (source, target) in foldTables[0] where target.count > 1 { sources[target, default: []].append(source) }
        return sources
    }()

    private static func isAssigned(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .unassigned, .privateUse, .surrogate: false
        default: true
        }
    }
}
