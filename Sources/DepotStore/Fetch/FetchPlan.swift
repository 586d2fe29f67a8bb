import DepotProtocol
import GRDB

/// A fetch request resolved against the model: the SQL to run and how to read its rows.
public struct FetchPlan: Sendable {
    /// The entity.
    public let entity: EntitySchema
    /// How rows become objects.
    public let shape: ObjectShape
    /// The request's `prefetch` key paths resolved, `nil` without any.
    public let prefetch: PrefetchPlan?
    /// The WHERE condition.
    public let condition: SQLFragment
    /// The ORDER BY list, always ending with the id tie-break.
    public let ordering: String
    /// The sort keys as resolved expressions, in order.
    public let sortExpressions: [(sql: String, type: AttributeType, ascending: Bool)]
    /// The request's limit and offset.
    public let limit: Int?
    /// The number of matches to skip.
    public let offset: Int?
    private let selectList: String

    /// Resolves `request` against `schema`.
    ///
    /// - Throws: -32602 naming `groupBy` for a grouped request, whose rows are
    ///   groups rather than objects (``GroupedFetchPlan`` reads those).
    /// - Parameter scope: the rows the requesting key may read, joined to the predicate as a tree.
    public init(_ request: DepotProtocol.FetchRequest, scope: ReadScope, schema: Schema, field: String = "params")
        throws(RPCError)
    {
        // What the key cannot read does not exist for it, relationships to it included.
        let schema = schema.visible(to: scope)
        if request.isGrouped {
            throw .invalidParams(
                "a grouped request (groupBy, aggregates, having) returns groups, not objects: this method reads objects",
                field: "\(field).groupBy")
        }
        entity = try schema.entity(request.entity, field: "\(field).entity")
        // A prefetched relationship is one of the rows' keys, so that the client can follow it.
        var prefetch: PrefetchPlan?
        if let paths = request.prefetch {
            prefetch = try PrefetchPlan(paths, entity: entity, schema: schema, field: "\(field).prefetch")
        }
        self.prefetch = prefetch
        var properties = request.properties
        if let prefetch, let named = properties {
            properties = named + prefetch.rowKeys.filter { key in !named.contains { $0.utf8.elementsEqual(key.utf8) } }
        }
        shape = try ObjectShape(
            entity: entity, properties: properties, alsoToMany: prefetch?.rowToManyKeys ?? [],
            field: "\(field).properties")
        condition = try PredicateCompilation.whereClause(
            predicate: request.predicate, arguments: request.arguments, scope: scope.predicate(for: entity.name),
            entity: entity,
            schema: schema)
        var expressions: [(sql: String, type: AttributeType, ascending: Bool)] = []
        for (index, descriptor) in (request.sort ?? []).enumerated() {
            let (sql, type) = try PredicateCompilation.keyPathExpression(
                descriptor.key, entity: entity, schema: schema, field: "\(field).sort[\(index)].key")
            expressions.append((sql, type, descriptor.ascending))
        }
        sortExpressions = expressions
        ordering = (expressions.map { "\($0.sql) \($0.ascending ? "ASC" : "DESC")" } + ["t0.id ASC"]).joined(
            separator: ", ")
        if let limit = request.limit, limit < 0 {
            throw .invalidParams("limit must not be negative, got \(limit)", field: "\(field).limit")
        }
        if let offset = request.offset, offset < 0 {
            throw .invalidParams("offset must not be negative, got \(offset)", field: "\(field).offset")
        }
        limit = request.limit
        offset = request.offset
        selectList = shape.selectList(schema: schema)
    }

    private var limitClause: String {
        switch (limit, offset) {
        case (nil, nil): ""
        case (let limit?, nil): " LIMIT \(limit)"
        case (nil, let offset?): " LIMIT -1 OFFSET \(offset)"
        case (let limit?, let offset?): " LIMIT \(limit) OFFSET \(offset)"
        }
    }

    /// The statement that reads the matching objects in order.
    public var objectsSQL: String {
        "SELECT \(selectList) FROM \(entity.table) AS t0 WHERE \(condition.sql) ORDER BY \(ordering)\(limitClause)"
    }

    /// The statement that reads the matching ids in order.
    public var idsSQL: String {
        "SELECT t0.id FROM \(entity.table) AS t0 WHERE \(condition.sql) ORDER BY \(ordering)\(limitClause)"
    }

    /// The statement that counts the matches (within limit and offset).
    public var countSQL: String {
        if limit == nil && offset == nil {
            return "SELECT COUNT(*) FROM \(entity.table) AS t0 WHERE \(condition.sql)"
        }
        return "SELECT COUNT(*) FROM (SELECT t0.id FROM \(entity.table) AS t0 WHERE \(condition.sql)\(limitClause))"
    }

    /// The bound arguments of every statement above.
    public var arguments: StatementArguments { StatementArguments(condition.arguments) }
}
