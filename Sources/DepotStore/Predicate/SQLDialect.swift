import DepotProtocol

/// The SQL a predicate compiles to: SQLite (the store, the default) or PostgreSQL (DESIGN section 11).
///
/// The compiler's logic (key paths, ANY/ALL/NONE, aggregates, SUBQUERY, nil
/// semantics) is the same for both; the dialect decides only the spelling:
/// placeholders (`?N` or `$N`), booleans (0/1 or `FALSE`/`TRUE`), null-safe
/// equality (`IS` or `IS NOT DISTINCT FROM`), string functions, text ordering
/// (PostgreSQL needs `COLLATE "C"` to sort by code points as SQLite's BINARY
/// does), aggregates, LIKE and MATCHES. PostgreSQL SQL calls the helper
/// functions of ``PostgreSQLFunctions``, which the store creates in its schema;
/// like the tables, they are found through the connection's `search_path`.
public enum SQLDialect: String, Sendable, Hashable, CaseIterable {
    /// SQLite, with the functions of `PredicateCompilation.registerFunctions(in:)`.
    case sqlite
    /// PostgreSQL, with the functions of ``PostgreSQLFunctions`` in the store's schema.
    case postgresql
}

extension SQLDialect {
    /// The placeholder of the `index`th (1-based) bound value.
    func placeholder(_ index: Int) -> String {
        switch self {
        case .sqlite: "?\(index)"
        case .postgresql: "$\(index)"
        }
    }

    /// A constant condition.
    func literal(_ value: Bool) -> String {
        switch self {
        case .sqlite: value ? "1" : "0"
        case .postgresql: value ? "TRUE" : "FALSE"
        }
    }

    /// `condition`, false where it is NULL.
    func orFalse(_ condition: String) -> String {
        switch self {
        case .sqlite: "IFNULL(\(condition), 0)"
        case .postgresql: "COALESCE(\(condition), FALSE)"
        }
    }

    /// Null-safe equality (nil equals nil), never NULL.
    func isSame(_ lhs: String, _ rhs: String) -> String {
        "(\(nullSafeEquals(lhs, rhs)))"
    }

    /// ``isSame(_:_:)`` without its parentheses (a term of an `OR`).
    func nullSafeEquals(_ lhs: String, _ rhs: String) -> String {
        switch self {
        case .sqlite: "\(lhs) IS \(rhs)"
        case .postgresql: "\(lhs) IS NOT DISTINCT FROM \(rhs)"
        }
    }

    /// Null-safe inequality, never NULL.
    func isDistinct(_ lhs: String, _ rhs: String) -> String {
        switch self {
        case .sqlite: "(\(lhs) IS NOT \(rhs))"
        case .postgresql: "(\(lhs) IS DISTINCT FROM \(rhs))"
        }
    }

    /// `sql` for an ordering comparison: text compares by code points, as SQLite's BINARY collation does.
    func ordered(_ sql: String, isText: Bool) -> String {
        guard self == .postgresql, isText else { return sql }
        return "(\(sql) COLLATE \"C\")"
    }

    /// A bound value of a boolean attribute (bound as 0/1).
    func boolean(_ placeholder: String) -> String {
        switch self {
        case .sqlite: placeholder
        case .postgresql: "(\(placeholder) <> 0)"
        }
    }

    /// Whether `text` begins with `prefix`, code point by code point.
    func beginsWith(_ text: String, _ prefix: String) -> String {
        switch self {
        case .sqlite: orFalse("\(text) GLOB depot_glob_literal(\(prefix)) || '*'")
        case .postgresql: orFalse("starts_with(\(text), \(prefix))")
        }
    }

    /// Whether `text` ends with `suffix`, code point by code point.
    func endsWith(_ text: String, _ suffix: String) -> String {
        switch self {
        case .sqlite: orFalse("\(text) GLOB '*' || depot_glob_literal(\(suffix))")
        case .postgresql: orFalse("(right(\(text), char_length(\(suffix))) = \(suffix) COLLATE \"C\")")
        }
    }

    /// Whether `text` contains `part`.
    func contains(_ text: String, _ part: String) -> String {
        switch self {
        case .sqlite: orFalse("instr(\(text), \(part)) > 0")
        case .postgresql: orFalse("strpos(\(text), \(part)) > 0")
        }
    }

    /// NSPredicate `LIKE` (`*`, `?`, `\` escapes), case- and diacritic-sensitive.
    func like(_ text: String, _ pattern: String) -> String {
        switch self {
        case .sqlite: orFalse("\(text) GLOB depot_glob(\(pattern))")
        case .postgresql: orFalse("\(text) LIKE depot_like(\(pattern))")
        }
    }

    /// `[c]`/`[d]` folding (`flags`: the options' raw bits).
    func fold(_ text: String, _ flags: Int) -> String {
        "depot_fold(\(text), \(flags))"
    }

    /// `@sum`: 0 over no rows, a double.
    func sum(_ value: String) -> String {
        switch self {
        case .sqlite: "TOTAL(\(value))"
        case .postgresql: "COALESCE(SUM((\(value))::float8), 0)"
        }
    }

    /// `@avg`: nil over no rows, a double.
    func average(_ value: String) -> String {
        switch self {
        case .sqlite: "AVG(\(value))"
        case .postgresql: "AVG((\(value))::float8)"
        }
    }

    /// `@min` or `@max` (`function`: `MIN` or `MAX`) of values of `type`.
    func extreme(_ function: String, _ value: String, type: AttributeType) -> String {
        switch (self, type) {
        case (.sqlite, _): "\(function)(\(value))"
        case (.postgresql, .string), (.postgresql, .uuid), (.postgresql, .json):
            "\(function)(\(value) COLLATE \"C\")"
        case (.postgresql, .boolean): "(\(function)((\(value))::int) <> 0)"
        case (.postgresql, _): "\(function)(\(value))"
        }
    }
}
