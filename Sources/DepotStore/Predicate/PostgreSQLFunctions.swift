import DepotProtocol
import Foundation

/// The SQL functions that predicates compiled for ``SQLDialect/postgresql`` call,
/// as statements the store runs in its schema when it creates it.
///
/// They are self-contained (no `unaccent` or ICU collation needed) and give the
/// answers of ``PredicateText``, which the in-memory evaluator and SQLite use:
///
/// - `depot_fold(text, flags)`: `[c]` (1), `[d]` (2) and `[cd]` (3) folding as
///   Foundation's `String.folding(options:locale:)` does it. The fold of every
///   code point alone is generated from ``PredicateText/fold(_:_:)`` itself. `[c]`
///   folds each code point alone. `[d]` works, as Foundation does, on clusters: a
///   code point and the grapheme extenders after it (combining marks and a few
///   others). After a Latin, Greek or Cyrillic letter (below U+0510, once folded)
///   the extenders go; after another code point Foundation drops a first
///   extender below U+0510 and keeps the others, decomposed and ordered by
///   combining class. Which code points do what is measured from Foundation too.
///   Helpers: `depot_fold_marks`, `depot_fold_cluster` and `depot_fold_order`
///   (PL/pgSQL, so that their plans last the session); ASCII text takes a shortcut.
/// - `depot_like(pattern)`: an NSPredicate `LIKE` pattern (`*`, `?`, `\`) as a
///   PostgreSQL `LIKE` pattern (`%`, `_`, `\`).
public enum PostgreSQLFunctions {
    /// `CREATE OR REPLACE FUNCTION` statements for `schema` (an unquoted name), to run in order.
    public static func statements(schema: String) -> [String] {
        let prefix = EntitySchema.quote(schema) + "."
        let extenders = PostgreSQLPattern.set(graphemeExtenders, negated: false)
        let lowExtenders = PostgreSQLPattern.set(
            graphemeExtenders.compactMap { range in
                range.lowerBound <= 0x50F ? range.lowerBound...min(range.upperBound, 0x50F) : nil
            }, negated: false)
        // The combining class of a code point in a cluster's extenders, as U+F0000 + class (0: unchanged).
        var classFrom = ""
        var classTo = ""
        for range in graphemeExtenders {
            for value in range {
                guard let scalar = Unicode.Scalar(value) else { continue }
                let combiningClass = scalar.properties.canonicalCombiningClass.rawValue
                guard combiningClass != 0 else { continue }
                classFrom.unicodeScalars.append(scalar)
                classTo.unicodeScalars.append(Unicode.Scalar(0xF0000 + UInt32(combiningClass))!)
            }
        }
        let combiningClass =
            "(CASE WHEN translate(ch, \(literal(classFrom)), \(literal(classTo))) = ch THEN 0 ELSE ascii(translate(ch, \(literal(classFrom)), \(literal(classTo)))) - \(0xF0000) END)"
        // The helpers that cannot be inlined into the caller's query are PL/pgSQL, whose plans last the
        // session (a SQL function called from another would parse its body again on every call).
        // Foundation's priority sort of a cluster's trailing extenders: past the leading class-0 ones, by class.
        let order = """
            CREATE OR REPLACE FUNCTION \(prefix)depot_fold_order(folded text) RETURNS text
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $depot$
            BEGIN
            RETURN (SELECT left(folded, char_length(folded) - char_length(run)) || coalesce((
                SELECT string_agg(ch, '' ORDER BY n >= first, CASE WHEN n >= first THEN \(combiningClass) END, n)
                FROM unnest(regexp_split_to_array(run, '')) WITH ORDINALITY AS c(ch, n),
                    (SELECT coalesce(min(n), 2147483647) AS first
                     FROM unnest(regexp_split_to_array(run, '')) WITH ORDINALITY AS c(ch, n)
                     WHERE \(combiningClass) <> 0) AS f), '')
            FROM (SELECT substring(folded from '\(extenders)*$') AS run) AS r);
            END
            $depot$
            """
        var cluster = """
            CREATE OR REPLACE FUNCTION \(prefix)depot_fold_cluster(cluster text, flags integer) RETURNS text
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $depot$
            DECLARE
            folded text := CASE flags
            """
        for flags in 2...3 {
            cluster += "\nWHEN \(flags) THEN " + mapping(flags, of: "left(cluster, 1)")
        }
        var kept = "CASE flags"
        for flags in 2...3 {
            let rules = markRules[flags - 2]
            let keepAll = rules.keepAll.isEmpty ? [0xF0000...0xF0000] : rules.keepAll
            kept += """

                WHEN \(flags) THEN CASE
                    WHEN left(cluster, 1) ~ '\(PostgreSQLPattern.set(rules.dropAll, negated: false))' THEN ''
                    WHEN left(cluster, 1) ~ '\(PostgreSQLPattern.set(keepAll, negated: false))' THEN substr(cluster, 2)
                    ELSE regexp_replace(substr(cluster, 2), '^\(lowExtenders)', '') END
                """
        }
        cluster += """

            END;
            kept text := \(decomposing(kept + "\nEND"));
            BEGIN
            IF kept = '' THEN
                RETURN folded;
            END IF;
            RETURN \(prefix)depot_fold_order(folded || kept);
            END
            $depot$
            """
        // The fast ways: text without extenders folds code point by code point; text whose clusters keep at
        // most one extender each (after the drops) needs no reordering. Other text goes cluster by cluster.
        var marks = """
            CREATE OR REPLACE FUNCTION \(prefix)depot_fold_marks(value text, flags integer) RETURNS text
            LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $depot$
            DECLARE
            stripped text;
            BEGIN
            """
        var stripping = "CASE flags"
        var ends = ""
        for flags in 2...3 {
            let rules = markRules[flags - 2]
            let dropAll = Set(rules.dropAll.flatMap { $0 })
            let keepAll = Set(rules.keepAll.flatMap { $0 })
            let extenderValues = graphemeExtenders.flatMap { $0 }
            let dropAllExtenders = PostgreSQLPattern.ranges(extenderValues.filter { dropAll.contains($0) })
            let otherExtenders = PostgreSQLPattern.ranges(
                extenderValues.filter { !dropAll.contains($0) && !keepAll.contains($0) })
            let dropAllLetters = PostgreSQLPattern.ranges(dropAll.filter { !extenderSet.contains($0) })
            let otherLetters = PostgreSQLPattern.complement(
                PostgreSQLPattern.merged(rules.dropAll + rules.keepAll + graphemeExtenders))
            var sql =
                "regexp_replace(value, '(\(PostgreSQLPattern.set(dropAllLetters, negated: false)))\(extenders)+', '\\1', 'g')"
            sql =
                "regexp_replace(\(sql), '(\(PostgreSQLPattern.set(otherLetters, negated: false)))\(lowExtenders)', '\\1', 'g')"
            if !dropAllExtenders.isEmpty {
                sql =
                    "regexp_replace(\(sql), '^(\(PostgreSQLPattern.set(dropAllExtenders, negated: false)))\(extenders)+', '\\1')"
            }
            if !otherExtenders.isEmpty {
                sql =
                    "regexp_replace(\(sql), '^(\(PostgreSQLPattern.set(otherExtenders, negated: false)))\(lowExtenders)', '\\1')"
            }
            stripping += "\nWHEN \(flags) THEN \(sql)"
            ends += """

                IF flags = \(flags) AND stripped ~ '^\(extenders)' THEN
                    RETURN \(mapping(flags, of: "left(stripped, 1)")) || \(decomposing(mapping(flags, of: "substr(stripped, 2)", skippingExtenders: true)));
                END IF;
                IF flags = \(flags) THEN
                    RETURN \(decomposing(mapping(flags, of: "stripped", skippingExtenders: true)));
                END IF;
                """
        }
        marks += """

            stripped := \(stripping)
            END;
            IF stripped ~ '\(extenders)\(extenders)' THEN
                RETURN (SELECT coalesce(string_agg(\(prefix)depot_fold_cluster(m[1], flags), '' ORDER BY n), '')
                    FROM regexp_matches(value, '.\(extenders)*', 'g') WITH ORDINALITY AS c(m, n));
            END IF;\(ends)
            RETURN NULL;
            END
            $depot$
            """
        let fold = """
            CREATE OR REPLACE FUNCTION \(prefix)depot_fold(value text, flags integer) RETURNS text
            LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $depot$
            SELECT CASE
            WHEN flags & 3 = 0 THEN value
            WHEN value !~ '[^\\u0001-\\u007f]' THEN
                CASE WHEN flags & 1 = 1 THEN translate(value, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') ELSE value END
            WHEN flags & 3 = 1 THEN \(mapping(1, of: "value"))
            WHEN flags & 3 = 2 THEN CASE WHEN value ~ '\(extenders)' THEN \(prefix)depot_fold_marks(value, 2) ELSE \(mapping(2, of: "value")) END
            ELSE CASE WHEN value ~ '\(extenders)' THEN \(prefix)depot_fold_marks(value, 3) ELSE \(mapping(3, of: "value")) END
            END
            $depot$
            """
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
        return [order, cluster, marks, fold, like]
    }

    /// `value` (SQL text) with the extenders that decompose canonically (U+0344 → U+0308 U+0301) decomposed.
    private static func decomposing(_ value: String) -> String {
        var sql = value
        for range in graphemeExtenders {
            for value in range {
                guard let scalar = Unicode.Scalar(value) else { continue }
                let decomposed = String(scalar).decomposedStringWithCanonicalMapping
                guard !decomposed.unicodeScalars.elementsEqual([scalar]) else { continue }
                sql = "replace(\(sql), \(literal(String(scalar))), \(literal(decomposed)))"
            }
        }
        return sql
    }

    /// `value` (SQL) with the code points that `flags` folds replaced by their folds.
    private static func mapping(_ flags: Int, of value: String, skippingExtenders: Bool = false) -> String {
        let table = foldTables[flags - 1]
        var from = ""
        var to = ""
        var multiple: [(UInt32, [UInt32])] = []
        // translate() looks each code point up from the start of `from`: printable ASCII comes first (as itself
        // when it does not fold), so that the common code points are found at once rather than after 1500 others.
        for value in UInt32(0x20)...0x7E {
            from.unicodeScalars.append(Unicode.Scalar(value)!)
            to.unicodeScalars.append(Unicode.Scalar(table[value]?.first ?? value)!)
        }
        for (source, target) in table.sorted(by: { $0.key < $1.key })
        where !(skippingExtenders && extenderSet.contains(source)) && !(0x20...0x7E).contains(source) {
            if target.count == 1 {
                from.unicodeScalars.append(Unicode.Scalar(source)!)
                to.unicodeScalars.append(Unicode.Scalar(target[0])!)
            } else {
                multiple.append((source, target))
            }
        }
        // No fold's result is folded again (checked by the tests), so the order of the replacements is free.
        let translated = "translate(\(value), \(literal(from)), \(literal(to)))"
        guard !multiple.isEmpty else { return translated }
        var sql = translated
        for (source, target) in multiple {
            let replacement = String(String.UnicodeScalarView(target.compactMap(Unicode.Scalar.init)))
            sql = "replace(\(sql), \(literal(String(Unicode.Scalar(source)!))), \(literal(replacement)))"
        }
        // The replacements only where a code point with a fold of several is present.
        let keys = PostgreSQLPattern.set(PostgreSQLPattern.ranges(multiple.map(\.0)), negated: false)
        return "(CASE WHEN \(value) ~ '\(keys)' THEN \(sql) ELSE \(translated) END)"
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

    /// The grapheme extenders of Foundation's folding: what `[d]` drops after a letter (combining marks and a few others).
    static let graphemeExtenders: [ClosedRange<UInt32>] = {
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

    /// ``graphemeExtenders`` as a set.
    static let extenderSet = Set(graphemeExtenders.flatMap { $0 })

    /// For `[d]` and `[cd]` (indexes 0, 1): the code points after which a cluster's extenders all go, and
    /// those after which they all stay (the others drop a first extender below U+0510 and keep the rest).
    ///
    /// Foundation drops them after a code point whose fold ends below U+0510; it keeps them all after
    /// one it changed otherwise (an Armenian capital under `[cd]`), and treats the unchanged others alike.
    static let markRules: [(dropAll: [ClosedRange<UInt32>], keepAll: [ClosedRange<UInt32>])] = (2...3).map { flags in
        let table = foldTables[flags - 1]
        var dropAll: [UInt32] = Array(0..<0x510).filter { table[$0] == nil }
        var keepAll: [UInt32] = []
        for (source, folded) in table {
            guard let scalar = Unicode.Scalar(source) else { continue }
            // An extender above U+050F after a changed code point stays unless all go.
            let probe = PredicateText.fold(String(scalar) + "\u{610}", flags).unicodeScalars.map(\.value)
            if probe == folded { dropAll.append(source) } else { keepAll.append(source) }
        }
        return (PostgreSQLPattern.ranges(dropAll), PostgreSQLPattern.ranges(keepAll))
    }

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
