/// A grouped fetch request (DESIGN.md §5, Grouped fetches) checked and typed:
/// the columns of each group's dictionary, the order of the groups and the
/// `having` predicate over the columns.
///
/// The SQL compiler (DepotStore's `GroupedFetchPlan`) and the in-memory
/// ``GroupedEvaluator`` both start from it, so that they validate alike and
/// name the same fields in their errors. It reads the model only through
/// `keyType`, which gives the type of an attribute key path or throws -32602
/// naming `field`.
public struct GroupedShape: Sendable {
    /// One member of a group's dictionary.
    public struct Column: Sendable, Hashable {
        /// Where a column's value comes from.
        public enum Source: Sendable, Hashable {
            /// A groupBy key path: the group's value of it.
            case groupKey(keyPath: String)
            /// An aggregate over the group's objects (`key` nil: count every object).
            case aggregate(AggregateFunction, key: String?)
        }

        /// The key in the dictionary: the groupBy key path, or the aggregate's name.
        public var name: String
        /// What the value is.
        public var source: Source
        /// The type of the values: the attribute's for a groupBy key and for
        /// `min`/`max`, `integer` for `count` and the `sum` of integers, `double` otherwise.
        public var type: AttributeType
        /// The type of the aggregate's key, when it has one.
        public var keyType: AttributeType?
    }

    /// The name of the entity ``havingEntity`` describes.
    public static let havingEntityName = "Group"

    /// The groupBy columns (in request order), then the aggregates.
    public let columns: [Column]
    /// How many of ``columns`` are groupBy keys (they come first).
    public let groupKeyCount: Int
    /// The request's sort, as column indexes; ties are broken by the groupBy keys in order.
    public let sort: [(column: Int, ascending: Bool)]
    /// The `having` predicate with every key path naming one column (`team.name` as one key), or nil.
    public let having: PredicateNode?
    /// The arguments of the request's `predicate`: all of an object of `$variables`
    /// (which `having` shares); of an array, the first ones, as many as the predicate
    /// has `%@ %K %d %f` (`having` takes the rest, in order).
    public let predicateArguments: JSONValue?

    /// Checks `request` (which ``FetchRequest/isGrouped``); `field` is the path of
    /// the request in the message (`params`, `params.request`).
    ///
    /// - Throws: -32602 naming the field for a result type other than
    ///   dictionaries or count, `properties`, no groupBy key and no aggregate, an
    ///   unknown or non-attribute key (from `keyType`), a json or binary groupBy key, a name used twice, a bad
    ///   name, `key` missing for a function other than count, `sum`/`avg` of a
    ///   non-numeric attribute, `min`/`max` of an unordered one, a sort key that
    ///   is no column, or a `having` naming anything else; -32014 for a malformed `having`.
    public init(
        _ request: FetchRequest, field: String,
        keyType: (_ keyPath: String, _ field: String) throws(RPCError) -> AttributeType
    ) throws(RPCError) {
        if let type = request.resultType, type != .dictionaries, type != .count {
            throw .invalidParams(
                "a grouped fetch (groupBy, aggregates, having) returns dictionaries or a count, not '\(type.rawValue)'",
                field: "\(field).resultType")
        }
        if request.properties != nil {
            throw .invalidParams(
                "a grouped fetch returns its groupBy keys and aggregates: leave properties out",
                field: "\(field).properties")
        }
        var columns: [Column] = []
        var seen: Set<String> = []
        for (index, keyPath) in (request.groupBy ?? []).enumerated() {
            let here = "\(field).groupBy[\(index)]"
            let type = try keyType(keyPath, here)
            // Binary values order as bytes in SQL and as base64 text on the wire: no one order to sort groups by.
            guard type != .json, type != .binary else {
                throw .invalidParams("cannot group by '\(keyPath)', a \(type.rawValue) attribute", field: here)
            }
            guard seen.insert(keyPath).inserted else {
                throw .invalidParams("groupBy names '\(keyPath)' twice", field: here)
            }
            columns.append(Column(name: keyPath, source: .groupKey(keyPath: keyPath), type: type))
        }
        groupKeyCount = columns.count
        for (index, aggregate) in (request.aggregates ?? []).enumerated() {
            let here = "\(field).aggregates[\(index)]"
            guard Self.isPlainName(aggregate.name) else {
                throw .invalidParams(
                    "aggregate name '\(aggregate.name)' must be a plain name (letters, digits, _; not starting with a digit)",
                    field: "\(here).name")
            }
            guard seen.insert(aggregate.name).inserted else {
                let other = columns.first { $0.name == aggregate.name }
                let what: String
                if case .groupKey? = other?.source { what = "a groupBy key" } else { what = "another aggregate" }
                throw .invalidParams(
                    "the name '\(aggregate.name)' is used twice: it is already \(what)", field: "\(here).name")
            }
            columns.append(try Self.aggregateColumn(aggregate, field: here, keyType: keyType))
        }
        guard !columns.isEmpty else {
            throw .invalidParams(
                "a grouped fetch needs groupBy keys or aggregates (having alone groups nothing)",
                field: "\(field).groupBy")
        }
        self.columns = columns
        var sort: [(column: Int, ascending: Bool)] = []
        for (index, descriptor) in (request.sort ?? []).enumerated() {
            guard let column = columns.firstIndex(where: { $0.name == descriptor.key }) else {
                throw .invalidParams(
                    "a grouped fetch sorts by its groupBy keys and aggregate names; '\(descriptor.key)' is neither (names: \(columns.map(\.name).joined(separator: ", ")))",
                    field: "\(field).sort[\(index)].key")
            }
            sort.append((column, descriptor.ascending))
        }
        self.sort = sort
        var havingArguments = request.arguments
        var predicateArguments = request.arguments
        if case .array(let elements)? = request.arguments {
            var used = 0
            if let predicate = request.predicate {
                var lexer = PredicateLexer(predicate)
                for token in try lexer.tokens() {
                    if case .formatArgument = token.kind { used += 1 }
                }
            }
            predicateArguments = .array(Array(elements.prefix(used)))
            havingArguments = .array(Array(elements.dropFirst(used)))
        }
        self.predicateArguments = predicateArguments
        if let text = request.having, !text.allSatisfy(\.isWhitespace) {
            let parsed = try PredicateParser.parse(text, arguments: havingArguments)
            having = try Self.namingColumns(parsed, columns.map(\.name))
        } else {
            having = nil
        }
    }

    /// -32602 for a `sum` of integers beyond 64 bits (SQLite stops the statement; the evaluator alike).
    public static let sumOverflow = RPCError.invalidParams(
        "a sum of integers overflowed 64 bits: narrow the predicate, or sum a double key", field: "params.aggregates")

    /// The groupBy key columns.
    public var groupKeys: ArraySlice<Column> { columns[..<groupKeyCount] }

    /// The aggregate columns.
    public var aggregates: ArraySlice<Column> { columns[groupKeyCount...] }

    /// A group as an entity whose attributes are the columns (typed): what
    /// `having` is compiled and evaluated against.
    public var havingEntity: EntityDescription {
        EntityDescription(
            name: Self.havingEntityName,
            attributes: columns.map { AttributeDescription(name: $0.name, type: $0.type, optional: true) })
    }

    private static func aggregateColumn(
        _ aggregate: ExpressionDescription, field: String,
        keyType: (_ keyPath: String, _ field: String) throws(RPCError) -> AttributeType
    ) throws(RPCError) -> Column {
        let source = Column.Source.aggregate(aggregate.function, key: aggregate.key)
        guard let key = aggregate.key else {
            guard aggregate.function == .count else {
                throw .invalidParams(
                    "\(aggregate.function.rawValue) needs a key (only count may leave it out)", field: "\(field).key")
            }
            return Column(name: aggregate.name, source: source, type: .integer)
        }
        let type = try keyType(key, "\(field).key")
        switch aggregate.function {
        case .count:
            return Column(name: aggregate.name, source: source, type: .integer, keyType: type)
        case .sum, .avg:
            guard type == .integer || type == .double else {
                throw .invalidParams(
                    "\(aggregate.function.rawValue) needs a numeric (integer or double) key; '\(key)' is \(type.rawValue)",
                    field: "\(field).key")
            }
            let result: AttributeType = aggregate.function == .sum && type == .integer ? .integer : .double
            return Column(name: aggregate.name, source: source, type: result, keyType: type)
        case .min, .max:
            guard type != .json, type != .binary else {
                throw .invalidParams(
                    "\(aggregate.function.rawValue) needs an ordered key; '\(key)' is \(type.rawValue)",
                    field: "\(field).key")
            }
            return Column(name: aggregate.name, source: source, type: type, keyType: type)
        }
    }

    private static func isPlainName(_ name: String) -> Bool {
        guard let first = name.first, first.isLetter || first == "_" else { return false }
        return name.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" }
    }

    /// `node` with each key path replaced by the one column it names (a dotted
    /// groupBy key such as `team.name` is one column); -32602 for any other key
    /// path, collection operator or SUBQUERY.
    private static func namingColumns(_ node: PredicateNode, _ names: [String]) throws(RPCError) -> PredicateNode {
        switch node {
        case .constant: return node
        case .not(let inner): return .not(try namingColumns(inner, names))
        case .and(let parts):
            var mapped: [PredicateNode] = []
            for part in parts { mapped.append(try namingColumns(part, names)) }
            return .and(mapped)
        case .or(let parts):
            var mapped: [PredicateNode] = []
            for part in parts { mapped.append(try namingColumns(part, names)) }
            return .or(mapped)
        case .comparison(var comparison):
            if comparison.modifier != nil {
                throw .invalidParams(
                    "having compares a group's values: ANY, ALL and NONE do not apply, at character \(comparison.position)",
                    field: "having")
            }
            comparison.lhs = try namingColumns(comparison.lhs, names, position: comparison.position)
            comparison.rhs = try namingColumns(comparison.rhs, names, position: comparison.position)
            return .comparison(comparison)
        }
    }

    private static func namingColumns(_ expression: PredicateExpression, _ names: [String], position: Int)
        throws(RPCError) -> PredicateExpression
    {
        switch expression {
        case .value: return expression
        case .keyPath(let path):
            let joined = path.joined(separator: ".")
            guard names.contains(joined) else {
                throw .invalidParams(
                    "having may name only groupBy keys and aggregate names; '\(joined)' is neither (names: \(names.joined(separator: ", ")))",
                    field: "having")
            }
            return .keyPath([joined])
        case .list(let elements):
            var mapped: [PredicateExpression] = []
            for element in elements { mapped.append(try namingColumns(element, names, position: position)) }
            return .list(mapped)
        case .aggregate, .subqueryCount:
            throw .invalidParams(
                "having compares a group's values: name an aggregate of the request instead of a collection operator or SUBQUERY, at character \(position)",
                field: "having")
        }
    }
}
