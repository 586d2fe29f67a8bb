/// The SQLite spelling of what a compiled predicate is made of (``PredicateCompiler``):
/// placeholders `?N`, booleans 0/1, null-safe equality with `IS`, string tests through the
/// functions of `PredicateCompilation.registerFunctions(in:)`, aggregates. The compiler's
/// logic (key paths, ANY/ALL/NONE, aggregates, SUBQUERY, nil semantics) stays apart from it.
enum SQLiteSpelling {
    /// The placeholder of the `index`th (1-based) bound value.
    static func placeholder(_ index: Int) -> String {
        "?\(index)"
    }

    /// A constant condition.
    static func literal(_ value: Bool) -> String {
        value ? "1" : "0"
    }

    /// `condition`, false where it is NULL.
    static func orFalse(_ condition: String) -> String {
        "IFNULL(\(condition), 0)"
    }

    /// Null-safe equality (nil equals nil), never NULL.
    static func isSame(_ lhs: String, _ rhs: String) -> String {
        "(\(nullSafeEquals(lhs, rhs)))"
    }

    /// ``isSame(_:_:)`` without its parentheses (a term of an `OR`).
    static func nullSafeEquals(_ lhs: String, _ rhs: String) -> String {
        "\(lhs) IS \(rhs)"
    }

    /// Null-safe inequality, never NULL.
    static func isDistinct(_ lhs: String, _ rhs: String) -> String {
        "(\(lhs) IS NOT \(rhs))"
    }

    /// Whether `text` begins with `prefix`, code point by code point.
    static func beginsWith(_ text: String, _ prefix: String) -> String {
        orFalse("\(text) GLOB depot_glob_literal(\(prefix)) || '*'")
    }

    /// Whether `text` ends with `suffix`, code point by code point.
    static func endsWith(_ text: String, _ suffix: String) -> String {
        orFalse("\(text) GLOB '*' || depot_glob_literal(\(suffix))")
    }

    /// Whether `text` contains `part`.
    static func contains(_ text: String, _ part: String) -> String {
        orFalse("instr(\(text), \(part)) > 0")
    }

    /// NSPredicate `LIKE` (`*`, `?`, `\` escapes), case- and diacritic-sensitive.
    static func like(_ text: String, _ pattern: String) -> String {
        orFalse("\(text) GLOB depot_glob(\(pattern))")
    }

    /// `[c]`/`[d]` folding (`flags`: the options' raw bits).
    static func fold(_ text: String, _ flags: Int) -> String {
        "depot_fold(\(text), \(flags))"
    }

    /// `@sum`: 0 over no rows, a double.
    static func sum(_ value: String) -> String {
        "TOTAL(\(value))"
    }

    /// `@avg`: nil over no rows, a double.
    static func average(_ value: String) -> String {
        "AVG(\(value))"
    }

    /// `@min` or `@max` (`function`: `MIN` or `MAX`).
    static func extreme(_ function: String, _ value: String) -> String {
        "\(function)(\(value))"
    }
}
