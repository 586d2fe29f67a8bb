/// Computes a grouped fetch (DESIGN.md §5, Grouped fetches) over objects held
/// in memory, with the semantics of the SQL the store compiles it to: the
/// oracle the differential tests hold the SQL to.
///
/// Objects are filtered with the ``PredicateEvaluator``, grouped by the values
/// of the groupBy key paths as SQL groups them (nil is a group of its own, a
/// date by its instant), aggregated (nil values are left out; `sum` of none is
/// 0, `avg`, `min` and `max` of none nil), filtered by `having`, sorted (nil
/// first ascending, numbers before text, text bytewise; ties broken by the
/// groupBy keys in order) and paged.
///
/// ```swift
/// let grouped = GroupedEvaluator(model: entities, evaluator: evaluator)
/// let rows = try grouped.evaluate(request, objects: teams)  // [["zone": "Europe", "wins": 12], …]
/// ```
public struct GroupedEvaluator {
    private let entities: [String: EntityDescription]
    private let evaluator: PredicateEvaluator

    /// Creates a grouped evaluator over `model`; `evaluator` follows relationships (over the same model).
    public init(model: [EntityDescription], evaluator: PredicateEvaluator) {
        entities = Dictionary(model.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        self.evaluator = evaluator
    }

    /// The dictionaries that grouped `request` answers, given every object of its entity.
    public func evaluate(_ request: FetchRequest, objects: [PredicateEvaluator.Object]) throws(RPCError)
        -> [[String: JSONValue]]
    {
        guard let entity = entities[request.entity] else {
            throw .invalidParams("unknown entity '\(request.entity)'", field: "params.entity")
        }
        let shape = try GroupedShape(request, field: "params") { (keyPath, field) throws(RPCError) in
            try attributeType(keyPath, of: entity, field: field)
        }
        var matching = objects
        if let predicate = request.predicate, !predicate.allSatisfy(\.isWhitespace) {
            let node = try PredicateParser.parse(predicate, arguments: shape.predicateArguments)
            matching = []
            for object in objects where try evaluator.evaluate(node, on: object, entity: entity.name) {
                matching.append(object)
            }
        }
        // Each group: its key (as SQL compares it) and its members, in first-seen order.
        var groupIndex: [[PredicateEvaluator.Scalar]: Int] = [:]
        var groups:
            [(key: [(wire: JSONValue, scalar: PredicateEvaluator.Scalar)], members: [PredicateEvaluator.Object])] =
                []
        for object in matching {
            var key: [(wire: JSONValue, scalar: PredicateEvaluator.Scalar)] = []
            for column in shape.groupKeys {
                key.append(try value(column.name, of: object, entity: entity.name))
            }
            let scalars = key.map(\.scalar)
            if let index = groupIndex[scalars] {
                groups[index].members.append(object)
            } else {
                groupIndex[scalars] = groups.count
                groups.append((key, [object]))
            }
        }
        let havingEvaluator = PredicateEvaluator(
            model: [shape.havingEntity], object: { _ in nil }, toMany: { _, _ in [] })
        var rows: [(dictionary: [String: JSONValue], scalars: [PredicateEvaluator.Scalar])] = []
        for group in groups {
            var dictionary: [String: JSONValue] = [:]
            var scalars: [PredicateEvaluator.Scalar] = []
            for (column, value) in zip(shape.groupKeys, group.key) {
                dictionary[column.name] = value.wire
                scalars.append(value.scalar)
            }
            for column in shape.aggregates {
                let value = try aggregate(column, over: group.members, entity: entity.name)
                dictionary[column.name] = value.wire
                scalars.append(value.scalar)
            }
            if let having = shape.having,
                !(try havingEvaluator.evaluate(having, on: dictionary, entity: GroupedShape.havingEntityName))
            {
                continue
            }
            rows.append((dictionary, scalars))
        }
        let order = shape.sort + (0..<shape.groupKeyCount).map { (column: $0, ascending: true) }
        rows.sort { left, right in
            for (column, ascending) in order {
                let comparison = Self.compare(left.scalars[column], right.scalars[column])
                if comparison != 0 { return ascending ? comparison < 0 : comparison > 0 }
            }
            return false
        }
        let start = min(rows.count, request.offset ?? 0)
        let end = request.limit.map { min(rows.count, start + $0) } ?? rows.count
        return rows[start..<end].map(\.dictionary)
    }

    private func value(_ keyPath: String, of object: PredicateEvaluator.Object, entity: String) throws(RPCError) -> (
        wire: JSONValue, scalar: PredicateEvaluator.Scalar
    ) {
        try evaluator.attributeValue(keyPath.split(separator: ".").map(String.init), on: object, entity: entity)
    }

    /// An aggregate column's value over `members`: on the wire and as SQL compares it.
    private func aggregate(_ column: GroupedShape.Column, over members: [PredicateEvaluator.Object], entity: String)
        throws(RPCError) -> (wire: JSONValue, scalar: PredicateEvaluator.Scalar)
    {
        guard case .aggregate(let function, let key) = column.source else { return (.null, .null) }
        guard let key else { return (.int(Int64(members.count)), .integer(Int64(members.count))) }
        var values: [(wire: JSONValue, scalar: PredicateEvaluator.Scalar)] = []
        for member in members {
            let value = try value(key, of: member, entity: entity)
            if value.scalar != .null { values.append(value) }
        }
        switch function {
        case .count:
            return (.int(Int64(values.count)), .integer(Int64(values.count)))
        case .sum where column.type == .integer:
            var total: Int64 = 0
            for value in values {
                guard case .integer(let number) = value.scalar else { continue }
                let (sum, overflow) = total.addingReportingOverflow(number)
                if overflow { throw GroupedShape.sumOverflow }
                total = sum
            }
            return (.int(total), .integer(total))
        case .sum:
            let total = values.reduce(0.0) { $0 + Self.number($1.scalar) }
            return (.double(total), .real(total))
        case .avg:
            guard !values.isEmpty else { return (.null, .null) }
            let mean = values.reduce(0.0) { $0 + Self.number($1.scalar) } / Double(values.count)
            return (.double(mean), .real(mean))
        case .min:
            return values.min { Self.compare($0.scalar, $1.scalar) < 0 } ?? (.null, .null)
        case .max:
            return values.max { Self.compare($0.scalar, $1.scalar) < 0 } ?? (.null, .null)
        }
    }

    private static func number(_ scalar: PredicateEvaluator.Scalar) -> Double {
        switch scalar {
        case .integer(let value): Double(value)
        case .real(let value): value
        default: 0
        }
    }

    /// -1, 0 or 1 as SQL's `ORDER BY` orders the values ascending: nil first.
    static func compare(_ left: PredicateEvaluator.Scalar, _ right: PredicateEvaluator.Scalar) -> Int {
        switch (left, right) {
        case (.null, .null): 0
        case (.null, _): -1
        case (_, .null): 1
        default: left.compare(right) ?? 0
        }
    }

    /// The type of the attribute at the end of `keyPath` (through to-one relationships).
    private func attributeType(_ keyPath: String, of entity: EntityDescription, field: String) throws(RPCError)
        -> AttributeType
    {
        let path = keyPath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var current = entity
        for (index, key) in path.enumerated() {
            if index == path.count - 1, let attribute = current.attribute(named: key) { return attribute.type }
            guard index < path.count - 1, let relationship = current.relationship(named: key), !relationship.toMany,
                let next = entities[relationship.destination]
            else {
                throw .invalidParams(
                    "'\(keyPath)' is not an attribute key path of \(entity.name) (through to-one relationships only)",
                    field: field)
            }
            current = next
        }
        throw .invalidParams("'\(keyPath)' is not an attribute key path of \(entity.name)", field: field)
    }
}
