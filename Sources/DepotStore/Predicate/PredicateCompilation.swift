import DepotProtocol
import Foundation
import GRDB

/// A piece of SQL with its bound arguments. Values are never spliced into `sql`.
public struct SQLFragment: Sendable {
    /// The SQL text; it refers to the fetched entity's table by the alias `t0`
    /// and numbers its parameters `?1`…`?n`: a statement
    /// that embeds it numbers any parameters of its own from `n+1`.
    public var sql: String
    /// The values bound to the `?` placeholders of `sql`, in order.
    public var arguments: [DatabaseValue]

    /// Creates a fragment.
    public init(sql: String, arguments: [DatabaseValue] = []) {
        self.sql = sql
        self.arguments = arguments
    }
}

/// The entry points from fetches, batch operations and fetched results into
/// the predicate language (docs/predicates.md).
public enum PredicateCompilation {
    /// The `WHERE` condition for `predicate` over `entity` (alias `t0`);
    /// always true (`1`) for no predicate.
    ///
    /// - Throws: -32014 with `data.position` and `data.expected` for a syntax
    ///   error; -32602 for an unknown key path, a type mismatch, a missing
    ///   `$variable` or a wrong number of `%@` arguments.
    public static func whereClause(
        predicate: String?, arguments: JSONValue?, scope: PredicateNode? = nil, entity: EntitySchema, schema: Schema
    ) throws(RPCError) -> SQLFragment {
        try compile(
            predicate: predicate, arguments: arguments, scope: scope, entity: entity, schema: schema
        )
        .fragment
    }

    /// The condition and the changes it depends on.
    ///
    /// `scope` (a key's row-level scope, DESIGN.md §2) is joined to the parsed
    /// predicate as a tree, `predicate AND scope`: no text of the request can widen it.
    public static func compile(
        predicate: String?, arguments: JSONValue?, scope: PredicateNode? = nil, entity: EntitySchema, schema: Schema
    ) throws(RPCError) -> (fragment: SQLFragment, dependencies: Set<PredicateDependency>) {
        let node = try combined(predicate: predicate, arguments: arguments, scope: scope)
        guard let node else { return (SQLFragment(sql: SQLiteSpelling.literal(true)), []) }
        return try compile(node: node, entity: entity, schema: schema)
    }

    /// The request's parsed predicate AND `scope`, or `nil` when both are empty.
    public static func combined(predicate: String?, arguments: JSONValue?, scope: PredicateNode?) throws(RPCError)
        -> PredicateNode?
    {
        var parsed: PredicateNode?
        if let predicate, !predicate.trimmingCharacters(in: .whitespaces).isEmpty {
            parsed = try PredicateParser.parse(predicate, arguments: arguments)
        }
        switch (parsed, scope) {
        case (nil, nil): return nil
        case (let node?, nil), (nil, let node?): return node
        case (let node?, let scope?): return .and([scope, node])
        }
    }

    /// The condition for a parsed `node` and the changes it depends on.
    public static func compile(
        node: PredicateNode, entity: EntitySchema, schema: Schema
    ) throws(RPCError) -> (fragment: SQLFragment, dependencies: Set<PredicateDependency>) {
        var compiler = PredicateCompiler(schema: schema)
        let sql = try compiler.compile(node, in: .init(entity: entity, alias: "t0", pathFromRoot: []))
        try validateRegularExpressions(node)
        return (SQLFragment(sql: sql, arguments: compiler.arguments), compiler.dependencies)
    }

    /// Registers the SQL functions that compiled predicates call, on every connection.
    public static func registerFunctions(in db: Database) {
        PredicateFunctions.register(in: db)
    }

    /// The SQL expression (over alias `t0`) and type of an attribute key path, through to-one relationships.
    public static func keyPathExpression(
        _ keyPath: String, entity: EntitySchema, schema: Schema, field: String
    ) throws(RPCError) -> (sql: String, type: AttributeType) {
        var compiler = PredicateCompiler(schema: schema)
        let path = keyPath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let resolved: PredicateCompiler.Resolved
        do {
            resolved = try compiler.resolve(path, in: .init(entity: entity, alias: "t0", pathFromRoot: []))
        } catch {
            throw .invalidParams(error.message, field: field)
        }
        guard case .scalar(let sql, let type?, _) = resolved else {
            throw .invalidParams(
                "'\(keyPath)' is not an attribute key path of \(entity.name) (sort and section keys must be attributes, through to-one relationships only)",
                field: field)
        }
        return (sql, type)
    }

    /// Refuses a literal MATCHES pattern that is not a valid regular expression.
    static func validateRegularExpressions(_ node: PredicateNode) throws(RPCError) {
        switch node {
        case .constant: return
        case .not(let inner): try validateRegularExpressions(inner)
        case .and(let parts), .or(let parts):
            for part in parts { try validateRegularExpressions(part) }
        case .comparison(let comparison):
            guard comparison.op == .matches, case .value(.string(let pattern)) = comparison.rhs else { return }
            do {
                _ = try NSRegularExpression(pattern: pattern)
            } catch {
                throw .invalidParams("MATCHES needs a valid regular expression, got '\(pattern)'", field: "predicate")
            }
        }
    }
}
