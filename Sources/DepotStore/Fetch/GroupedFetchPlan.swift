import DepotProtocol
import GRDB

/// A grouped fetch request (DESIGN.md §5, Grouped fetches) resolved against the
/// model: one SQL statement that groups, aggregates, filters the groups, sorts
/// and pages them, and how to write its rows as dictionaries.
///
/// The statement, with every value bound:
///
/// ```sql
/// SELECT * FROM (
///   SELECT t0."qualifyingZone" AS "qualifyingZone", COUNT(*) AS "teams", COALESCE(SUM(t0."wins"), 0) AS "wins"
///   FROM "e_Team" AS t0 WHERE <predicate> GROUP BY t0."qualifyingZone"
/// ) AS g WHERE <having over g> ORDER BY g."wins" DESC, g."qualifyingZone" ASC LIMIT ?
/// ```
///
/// A to-one key path is the same correlated subquery the predicate compiler
/// reads it with. It always runs on SQLite: a cluster daemon reads its SQLite replica.
public struct GroupedFetchPlan: Sendable {
    /// The entity.
    public let entity: EntitySchema
    /// The checked request: columns, sort and `having`.
    public let shape: GroupedShape
    /// The statement that reads the groups in order, paged.
    public let rowsSQL: String
    /// The statement that counts the groups (within limit and offset).
    public let countSQL: String
    /// The bound arguments of both statements.
    public let arguments: StatementArguments
    /// The key paths a live grouped result reads of each matching object (DESIGN.md §7):
    /// the groupBy keys in order, then each aggregate key not among them, once.
    public let memberKeyPaths: [String]
    /// The statement that reads every matching object as its id and the values
    /// of ``memberKeyPaths``, unordered and ungrouped (bound with ``memberArguments``).
    public let membersSQL: String
    /// The bound arguments of ``membersSQL`` (the predicate's).
    public let memberArguments: [DatabaseValue]
    /// The request's limit over groups.
    public let limit: Int?
    /// The number of groups the request skips.
    public let offset: Int?

    /// Resolves `request` (which ``FetchRequest/isGrouped``) against `schema`;
    /// `field` is the request's path in the message.
    ///
    /// - Throws: -32602 naming the field (see ``GroupedShape``); -32014 for a malformed predicate or `having`.
    /// `scope` is the rows the requesting key may read, joined to the predicate as a tree.
    public init(_ request: DepotProtocol.FetchRequest, scope: ReadScope, schema: Schema, field: String = "params")
        throws(RPCError)
    {
        // What the key cannot read does not exist for it, relationships to it included.
        let schema = schema.visible(to: scope)
        let entity = try schema.entity(request.entity, field: "\(field).entity")
        self.entity = entity
        var expressions: [String: String] = [:]
        let shape = try GroupedShape(request, field: field) { (keyPath, field) throws(RPCError) in
            let (sql, type) = try PredicateCompilation.keyPathExpression(
                keyPath, entity: entity, schema: schema, field: field)
            expressions[keyPath] = sql
            return type
        }
        self.shape = shape
        try Self.requireNotNegative(request.limit, "\(field).limit")
        try Self.requireNotNegative(request.offset, "\(field).offset")
        limit = request.limit
        offset = request.offset
        let condition = try PredicateCompilation.whereClause(
            predicate: request.predicate, arguments: shape.predicateArguments, scope: scope.predicate(for: entity.name),
            entity: entity,
            schema: schema)
        var memberKeyPaths = shape.groupKeys.map(\.name)
        for column in shape.aggregates {
            if case .aggregate(_, let key?) = column.source, !memberKeyPaths.contains(key) {
                memberKeyPaths.append(key)
            }
        }
        self.memberKeyPaths = memberKeyPaths
        membersSQL =
            "SELECT t0.id\(memberKeyPaths.map { ", " + (expressions[$0] ?? "NULL") }.joined()) FROM \(entity.table) AS t0 WHERE \(condition.sql)"
        memberArguments = condition.arguments
        var selected: [String] = []
        var grouped: [String] = []
        for column in shape.columns {
            let alias = EntitySchema.quote(column.name)
            switch column.source {
            case .groupKey(let keyPath):
                let sql = expressions[keyPath] ?? "NULL"
                selected.append("\(sql) AS \(alias)")
                grouped.append(sql)
            case .aggregate(let function, let key):
                let value = key.flatMap { expressions[$0] } ?? "*"
                selected.append("\(Self.aggregateSQL(function, value, type: column.type)) AS \(alias)")
            }
        }
        // No groupBy key: one group over every match, and none when nothing matches.
        let groupClause = grouped.isEmpty ? " HAVING COUNT(*) > 0" : " GROUP BY " + grouped.joined(separator: ", ")
        let inner =
            "SELECT \(selected.joined(separator: ", ")) FROM \(entity.table) AS t0 WHERE \(condition.sql)\(groupClause)"
        var bound = condition.arguments
        var havingSQL = "1"
        if let having = shape.having {
            var compiler = PredicateCompiler(schema: schema, boundBefore: condition.arguments)
            do {
                havingSQL = try compiler.compile(
                    having, in: .init(entity: EntitySchema(shape.havingEntity), alias: "g", pathFromRoot: nil))
                try PredicateCompilation.validateRegularExpressions(having)
            } catch {
                // The compiler names `predicate`; here it is `having`.
                if error.code == .invalidParams { throw .invalidParams(error.message, field: "having") }
                throw error
            }
            bound = compiler.arguments
        }
        let order =
            shape.sort.map { "g.\(EntitySchema.quote(shape.columns[$0.column].name)) \($0.ascending ? "ASC" : "DESC")" }
            + shape.groupKeys.map { "g.\(EntitySchema.quote($0.name)) ASC" }
        let paging: String
        switch (request.limit, request.offset) {
        case (nil, nil): paging = ""
        case (let limit?, nil): paging = " LIMIT \(limit)"
        case (nil, let offset?): paging = " LIMIT -1 OFFSET \(offset)"
        case (let limit?, let offset?): paging = " LIMIT \(limit) OFFSET \(offset)"
        }
        let filtered = "SELECT * FROM (\(inner)) AS g WHERE \(havingSQL)"
        rowsSQL = filtered + (order.isEmpty ? "" : " ORDER BY " + order.joined(separator: ", ")) + paging
        countSQL = "SELECT COUNT(*) FROM (\(filtered)\(paging))"
        arguments = StatementArguments(bound)
    }

    /// Writes a row of ``rowsSQL`` as the group's dictionary: the groupBy keys, then the aggregates.
    public func write(_ row: Row, into writer: inout JSONWriter) {
        writer.writeRaw("{")
        for (index, column) in shape.columns.enumerated() {
            if index > 0 { writer.writeRaw(",") }
            writer.write(column.name)
            writer.writeRaw(":")
            // count, sum and avg are typed like their column too (integer or double).
            writer.write(ValueCoding.json(row[index] as DatabaseValue, type: column.type))
        }
        writer.writeRaw("}")
    }

    /// `count` and the `sum` of integers are integers (0 over no values), `avg` a double, `min`/`max` keep the type.
    private static func aggregateSQL(_ function: AggregateFunction, _ value: String, type: AttributeType) -> String {
        switch function {
        case .count: "COUNT(\(value))"
        case .sum: type == .integer ? "COALESCE(SUM(\(value)), 0)" : "TOTAL(\(value))"
        case .avg: "AVG(\(value))"
        case .min: "MIN(\(value))"
        case .max: "MAX(\(value))"
        }
    }

    private static func requireNotNegative(_ value: Int?, _ field: String) throws(RPCError) {
        if let value, value < 0 { throw .invalidParams("\(field) must not be negative, got \(value)", field: field) }
    }
}
