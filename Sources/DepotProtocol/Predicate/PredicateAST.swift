/// A parsed predicate, with every argument already bound (`$name`, `%@`, `%K`).
///
/// Key paths are still names here; ``PredicateCompiler`` resolves them against
/// the model, so one tree serves SQL and in-memory evaluation alike.
public indirect enum PredicateNode: Hashable, Sendable {
    /// `TRUEPREDICATE` / `FALSEPREDICATE`.
    case constant(Bool)
    /// `NOT p`.
    case not(PredicateNode)
    /// `p AND q AND …`.
    case and([PredicateNode])
    /// `p OR q OR …`.
    case or([PredicateNode])
    /// `lhs op rhs`, with an optional collection modifier and string options.
    case comparison(Comparison)
}

/// One comparison of a predicate.
public struct Comparison: Hashable, Sendable {
    /// `ANY`/`SOME`, `ALL` or `NONE` before a to-many key path.
    public enum Modifier: String, Hashable, Sendable {
        case any, all, none
    }

    /// The operator.
    public enum Operator: String, Hashable, Sendable {
        case equal = "=="
        case notEqual = "!="
        case less = "<"
        case lessOrEqual = "<="
        case greater = ">"
        case greaterOrEqual = ">="
        case between = "BETWEEN"
        case `in` = "IN"
        case beginsWith = "BEGINSWITH"
        case endsWith = "ENDSWITH"
        case contains = "CONTAINS"
        case like = "LIKE"
        case matches = "MATCHES"

        /// The operator with its sides swapped (`3 < wins` is `wins > 3`), for the ordering and equality operators.
        public var flipped: Operator? {
            switch self {
            case .equal: .equal
            case .notEqual: .notEqual
            case .less: .greater
            case .lessOrEqual: .greaterOrEqual
            case .greater: .less
            case .greaterOrEqual: .lessOrEqual
            default: nil
            }
        }

        /// Whether the operator compares strings (and takes `[c]`, `[d]`).
        public var isStringOperator: Bool {
            switch self {
            case .beginsWith, .endsWith, .contains, .like, .matches: true
            default: false
            }
        }
    }

    /// `[c]` (case-insensitive) and `[d]` (diacritic-insensitive).
    public struct Options: OptionSet, Hashable, Sendable {
        public let rawValue: Int
        /// Creates options from bits.
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// `[c]`.
        public static let caseInsensitive = Options(rawValue: 1)
        /// `[d]`.
        public static let diacriticInsensitive = Options(rawValue: 2)
    }

    /// The collection modifier, if any.
    public var modifier: Modifier?
    /// The left side.
    public var lhs: PredicateExpression
    /// The operator.
    public var op: Comparison.Operator
    /// The right side.
    public var rhs: PredicateExpression
    /// String options.
    public var options: Options
    /// Where the comparison starts in the predicate text, for error messages.
    public var position: Int

    /// Creates a comparison.
    public init(
        modifier: Modifier? = nil, lhs: PredicateExpression, op: Operator, rhs: PredicateExpression,
        options: Options = [], position: Int = 0
    ) {
        self.modifier = modifier
        self.lhs = lhs
        self.op = op
        self.rhs = rhs
        self.options = options
        self.position = position
    }

    /// The same comparison with its key path on the left: `value op keyPath` becomes `keyPath op' value`,
    /// and `value IN collection` becomes `ANY collection == value`. Other comparisons come back unchanged.
    public var keyPathOnLeft: Comparison {
        guard case .value = lhs, case .keyPath = rhs else { return self }
        if op == .in {
            return Comparison(modifier: .any, lhs: rhs, op: .equal, rhs: lhs, options: options, position: position)
        }
        guard let flipped = op.flipped else { return self }
        return Comparison(modifier: modifier, lhs: rhs, op: flipped, rhs: lhs, options: options, position: position)
    }
}

/// One side of a comparison.
public indirect enum PredicateExpression: Hashable, Sendable {
    /// A key path such as `team.country.name`; a `$variable` of a SUBQUERY starts with that variable's name.
    case keyPath([String])
    /// A constant.
    case value(JSONValue)
    /// `{a, b, …}`.
    case list([PredicateExpression])
    /// `keyPath.@count`, `keyPath.@sum.key`, … over a to-many relationship.
    case aggregate(function: AggregateFunction, collection: [String], key: [String])
    /// `SUBQUERY(collection, $variable, predicate)`; used with `.@count`.
    case subqueryCount(collection: [String], variable: String, predicate: PredicateNode)
}

/// A collection operator of a key path (`@count`, `@sum`, …), and the function
/// of a grouped fetch's aggregate (``ExpressionDescription``).
public enum AggregateFunction: String, Codable, Hashable, Sendable, CaseIterable {
    /// The number of objects (or of non-nil values).
    case count
    /// The sum of the non-nil values (0 when there are none).
    case sum
    /// The mean of the non-nil values (nil when there are none).
    case avg
    /// The least non-nil value.
    case min
    /// The greatest non-nil value.
    case max
}
