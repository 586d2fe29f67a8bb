import DepotProtocol
import GRDB

/// A piece of SQL with its bound arguments. Values are never spliced into `sql`.
public struct SQLFragment: Sendable {
    /// The SQL text; it refers to the fetched entity's table by the alias `t0`.
    public var sql: String
    /// The values bound to the `?` placeholders of `sql`, in order.
    public var arguments: [DatabaseValue]

    /// Creates a fragment.
    public init(sql: String, arguments: [DatabaseValue] = []) {
        self.sql = sql
        self.arguments = arguments
    }
}

/// The entry points from fetches and saves into the predicate language.
///
/// STUB: the full parser, compiler and evaluator live beside this file.
public enum PredicateCompilation {
    /// The `WHERE` condition for `predicate` over `entity` (alias `t0`); `1` for no predicate.
    public static func whereClause(
        predicate: String?, arguments: JSONValue?, entity: EntitySchema, schema: Schema
    ) throws(RPCError) -> SQLFragment {
        guard let predicate, !predicate.isEmpty else { return SQLFragment(sql: "1") }
        throw RPCError(code: .predicateSyntax, message: "predicates are not supported yet: \(predicate)")
    }

    /// Registers the SQL functions that compiled predicates call, on every connection.
    public static func registerFunctions(in db: Database) {}

    /// The SQL expression (over alias `t0`) and type of an attribute key path, through to-one relationships.
    public static func keyPathExpression(
        _ keyPath: String, entity: EntitySchema, schema: Schema, field: String
    ) throws(RPCError) -> (sql: String, type: AttributeType) {
        guard let attribute = entity.attributes[keyPath] else {
            throw .invalidParams("unknown key '\(keyPath)' on \(entity.name) (keys: \(entity.keyList))", field: field)
        }
        return ("t0." + entity.column(keyPath), attribute.type)
    }
}
