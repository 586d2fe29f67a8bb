import DepotProtocol
import Foundation
import GRDB

/// What a change to another entity can do to a predicate's or key path's value,
/// so that fetched results re-evaluate only the objects it can reach.
public enum PredicateDependency: Hashable, Sendable {
    /// Objects whose to-one `path` (relationship names from the fetched entity) leads to a changed `entity` row.
    case toOne(entity: String, path: [String])
    /// Objects whose to-many relationship holds a changed `entity` row: the row's `inverse` column names the owner.
    case toMany(entity: String, inverse: String)
    /// Objects whose many-to-many `relationship` (of the fetched entity) holds a changed `entity` row.
    case joined(entity: String, relationship: String)
    /// Any object may be affected by a change to `entity` (the fallback for deeper paths).
    case any(entity: String)
}

/// Compiles a ``PredicateNode`` to a SQLite condition (``SQLiteSpelling``) over the
/// fetched entity's table, aliased `t0`.
///
/// Every comparison compiles to an expression that is 0 or 1, never NULL, so
/// that NOT, AND and OR follow Core Data's in-memory semantics rather than
/// SQL's three-valued logic: `nil == nil` and `nil != 'x'` are true, ordering
/// comparisons with nil are false, ANY over an empty set is false, ALL over
/// an empty set is true. Values are always bound as parameters; key paths are
/// resolved against the model and their identifiers quoted.
struct PredicateCompiler {
    let schema: Schema
    private(set) var arguments: [DatabaseValue] = []
    private(set) var dependencies: Set<PredicateDependency> = []
    private var aliasCount = 0
    /// The shadow column (`folded` attributes, SQLite only) of each attribute column resolved so far, by the column's SQL.
    private var foldedColumns: [String: String] = [:]

    /// A compiler whose SQL goes into a statement that already binds `boundBefore`
    /// (its own parameters are numbered after them).
    init(schema: Schema, boundBefore: [DatabaseValue] = []) {
        self.schema = schema
        self.arguments = boundBefore
    }

    /// A row in scope: its entity and the SQL alias of its table.
    struct Scope {
        var entity: EntitySchema
        var alias: String
        /// Relationship path from the fetched entity, when this scope is reached through to-ones only (for dependencies).
        var pathFromRoot: [String]?
        var variables: [String: (entity: EntitySchema, alias: String)] = [:]
    }

    /// A resolved key path.
    enum Resolved {
        /// A single value: an attribute (`type`) or a to-one relationship's row id (`destination`).
        case scalar(sql: String, type: AttributeType?, destination: EntitySchema?)
        /// A to-many relationship of the row `owner`, followed by `remainder`.
        case collection(
            owner: String, relationship: RelationshipDescription, destination: EntitySchema, remainder: [String],
            ownerPath: [String]?)
    }

    private mutating func makeAlias() -> String {
        aliasCount += 1
        return "p\(aliasCount)"
    }

    /// Binds `value`; the placeholder is numbered (`?N`, `$N`) so that an operand
    /// may appear twice in the SQL (BETWEEN, IN) without binding it twice.
    private mutating func bind(_ value: DatabaseValue) -> String {
        arguments.append(value)
        return SQLiteSpelling.placeholder(arguments.count)
    }

    // MARK: Key paths

    func unknownKey(_ key: String, of entity: EntitySchema, path: [String]) -> RPCError {
        .invalidParams(
            "unknown key path '\(path.joined(separator: "."))': \(entity.name) has no key '\(key)' (keys: \(entity.keyList))",
            field: "predicate")
    }

    /// Resolves `path` from `scope`.
    mutating func resolve(_ path: [String], in scope: Scope) throws(RPCError) -> Resolved {
        var components = path[...]
        var entity = scope.entity
        var rowSQL = "\(scope.alias).id"
        var isAliasRow = true
        var alias = scope.alias
        var pathFromRoot = scope.pathFromRoot
        if let first = components.first, first.hasPrefix("$") {
            guard let variable = scope.variables[first] else {
                throw .invalidParams("unknown variable \(first) in the predicate", field: "predicate")
            }
            entity = variable.entity
            alias = variable.alias
            rowSQL = "\(alias).id"
            pathFromRoot = nil
            components = components.dropFirst()
            if components.isEmpty { return .scalar(sql: rowSQL, type: nil, destination: entity) }
        }
        func column(_ key: String) -> String {
            read(entity.column(key))
        }
        func read(_ column: String) -> String {
            isAliasRow
                ? "\(alias).\(column)"
                : "(SELECT x.\(column) FROM \(entity.table) AS x WHERE x.id = \(rowSQL))"
        }
        while let key = components.first {
            components = components.dropFirst()
            // `SELF` is the object itself; `id` (unless the model has such a key) is its id.
            if key.uppercased() == "SELF" { continue }
            if key == "id", entity.attributes[key] == nil, entity.toOne[key] == nil, entity.toMany[key] == nil {
                guard components.isEmpty else {
                    throw .invalidParams(
                        "unknown key path '\(path.joined(separator: "."))': an object's id has no key '\(components.first!)'",
                        field: "predicate")
                }
                break
            }
            if let attribute = entity.attributes[key] {
                guard components.isEmpty else { throw unknownKey(components.first!, of: entity, path: path) }
                let sql = column(key)
                if let shadow = entity.foldedColumn(key) { foldedColumns[sql] = read(shadow) }
                return .scalar(sql: sql, type: attribute.type, destination: nil)
            }
            if let relationship = entity.toOne[key], let destination = schema.entity(named: relationship.destination) {
                let next = column(key)
                pathFromRoot = pathFromRoot.map { $0 + [key] }
                if let path = pathFromRoot {
                    dependencies.insert(.toOne(entity: destination.name, path: path))
                } else {
                    dependencies.insert(.any(entity: destination.name))
                }
                if components.isEmpty { return .scalar(sql: next, type: nil, destination: destination) }
                entity = destination
                rowSQL = next
                isAliasRow = false
                continue
            }
            if let relationship = entity.toMany[key], let destination = schema.entity(named: relationship.destination) {
                if let path = pathFromRoot, path.isEmpty, entity.joins[key] != nil {
                    dependencies.insert(.joined(entity: destination.name, relationship: key))
                } else if let path = pathFromRoot, path.isEmpty, let inverse = relationship.inverse {
                    dependencies.insert(.toMany(entity: destination.name, inverse: inverse))
                } else {
                    dependencies.insert(.any(entity: destination.name))
                }
                return .collection(
                    owner: rowSQL, relationship: relationship, destination: destination, remainder: Array(components),
                    ownerPath: pathFromRoot)
            }
            throw unknownKey(key, of: entity, path: path)
        }
        return .scalar(sql: rowSQL, type: nil, destination: entity)
    }

    // MARK: Predicates

    mutating func compile(_ node: PredicateNode, in scope: Scope) throws(RPCError) -> String {
        switch node {
        case .constant(let value): return SQLiteSpelling.literal(value)
        case .not(let inner): return "(NOT \(try compile(inner, in: scope)))"
        case .and(let parts):
            var compiled: [String] = []
            for part in parts { compiled.append(try compile(part, in: scope)) }
            return "(" + compiled.joined(separator: " AND ") + ")"
        case .or(let parts):
            var compiled: [String] = []
            for part in parts { compiled.append(try compile(part, in: scope)) }
            return "(" + compiled.joined(separator: " OR ") + ")"
        case .comparison(let comparison): return try compile(comparison, in: scope)
        }
    }

    /// A comparison whose left side may be a collection: ANY / ALL / NONE become EXISTS subqueries.
    private mutating func compile(_ comparison: Comparison, in scope: Scope) throws(RPCError) -> String {
        var comparison = comparison
        // `x IN 'text'`: a substring test, as in NSPredicate.
        if comparison.op == .in, let substring = try substringTest(comparison, in: scope) {
            return try compileScalar(substring, in: scope)
        }
        comparison = comparison.keyPathOnLeft
        if case .keyPath(let path) = comparison.lhs,
            case .collection(let owner, let relationship, let destination, let remainder, _) = try resolve(
                path, in: scope)
        {
            let alias = makeAlias()
            let from = try members(of: relationship, destination: destination, alias: alias, owner: owner)
            let inner = Scope(entity: destination, alias: alias, pathFromRoot: nil, variables: scope.variables)
            var element = comparison
            element.modifier = nil
            element.lhs = remainder.isEmpty ? .keyPath(["$__self"]) : .keyPath(remainder)
            var innerScope = inner
            innerScope.variables["$__self"] = (destination, alias)
            let condition = try compileScalar(element, in: innerScope)
            switch comparison.modifier ?? .any {
            case .any: return "EXISTS (SELECT 1 \(from) AND \(condition))"
            case .all: return "(NOT EXISTS (SELECT 1 \(from) AND NOT \(condition)))"
            case .none: return "(NOT EXISTS (SELECT 1 \(from) AND \(condition)))"
            }
        }
        if comparison.modifier != nil {
            throw .invalidParams(
                "ANY, ALL and NONE need a to-many key path on the left, at character \(comparison.position)",
                field: "predicate")
        }
        return try compileScalar(comparison, in: scope)
    }

    /// `x IN s` where `s` is a string (a constant, an argument or a string key
    /// path), as `s CONTAINS x`; nil when the right side is a list or a to-many key path.
    private mutating func substringTest(_ comparison: Comparison, in scope: Scope) throws(RPCError) -> Comparison? {
        switch comparison.rhs {
        case .value(.string): break
        case .keyPath(let path):
            guard case .scalar(_, .string?, _) = try resolve(path, in: scope) else { return nil }
        default: return nil
        }
        let leftType: String?
        switch comparison.lhs {
        case .value(.string), .value(.null): leftType = nil
        case .value(let value): leftType = value.excerpt()
        case .keyPath(let path):
            switch try resolve(path, in: scope) {
            case .scalar(_, .string?, _): leftType = nil
            case .scalar(_, let type, let destination):
                leftType = type?.rawValue ?? destination.map { "a relationship to \($0.name)" } ?? "not a string"
            case .collection: return nil  // ANY/ALL/NONE compare each element.
            }
        default: leftType = "not a string"
        }
        if let leftType {
            throw .invalidParams(
                "IN with a string on the right is a substring test and needs a string on the left, got \(leftType), at character \(comparison.position)",
                field: "predicate")
        }
        return Comparison(
            lhs: comparison.rhs, op: .contains, rhs: comparison.lhs, options: comparison.options,
            position: comparison.position)
    }

    /// `FROM … WHERE …` over the related rows of a to-many `relationship` of the
    /// row `owner`, aliased `alias`: the destination rows whose inverse column
    /// names the owner, or, for a many-to-many, those paired with it in its join table.
    private func members(
        of relationship: RelationshipDescription, destination: EntitySchema, alias: String, owner: String
    ) throws(RPCError) -> String {
        guard let inverse = relationship.inverse else {
            throw .invalidParams("to-many relationship \(relationship.name) has no inverse", field: "predicate")
        }
        if let join = destination.joins[inverse] {
            // Seen from the destination: its rows are the owner column of its side, ours the member column.
            return
                "FROM \(join.table) AS \(alias)j JOIN \(destination.table) AS \(alias) ON \(alias).id = \(alias)j.\(join.ownerColumn) WHERE \(alias)j.\(join.memberColumn) = \(owner)"
        }
        return "FROM \(destination.table) AS \(alias) WHERE \(alias).\(destination.column(inverse)) = \(owner)"
    }

    /// An operand as SQL, with its type when known.
    private struct Operand {
        var sql: String
        var type: AttributeType?
        var destination: EntitySchema?
        var isNullLiteral = false
        /// The bound value, for a constant.
        var constant: DatabaseValue?
        /// The constant's position in the arguments (from 1), for folding it in place.
        var argumentIndex: Int?
        /// The shadow column holding the value folded for `[cd]`, for a `folded` attribute.
        var folded: String?
    }

    private mutating func operand(
        _ expression: DepotProtocol.PredicateExpression, in scope: Scope, expecting type: AttributeType?,
        destination: EntitySchema?, position: Int
    ) throws(RPCError) -> Operand {
        switch expression {
        case .keyPath(let path):
            switch try resolve(path, in: scope) {
            case .scalar(let sql, let type, let destination):
                return Operand(sql: sql, type: type, destination: destination, folded: foldedColumns[sql])
            case .collection(_, let relationship, _, _, _):
                throw .invalidParams(
                    "'\(path.joined(separator: "."))' is the to-many relationship \(relationship.name): compare with ANY, ALL or NONE, or use @count",
                    field: "predicate")
            }
        case .value(let value):
            if value.isNull { return Operand(sql: "NULL", type: type, isNullLiteral: true) }
            let stored = try typedValue(value, type: type, destination: destination, position: position)
            let placeholder = bind(stored)
            return Operand(
                sql: placeholder, type: type, constant: stored,
                argumentIndex: arguments.count)
        case .aggregate(let function, let collection, let key):
            guard
                case .collection(let owner, let relationship, let destinationEntity, let remainder, _) = try resolve(
                    collection, in: scope), remainder.isEmpty
            else {
                throw .invalidParams(
                    "@\(function.rawValue) needs a to-many key path, got '\(collection.joined(separator: "."))'",
                    field: "predicate")
            }
            let alias = makeAlias()
            let from = try members(of: relationship, destination: destinationEntity, alias: alias, owner: owner)
            if function == .count { return Operand(sql: "(SELECT COUNT(*) \(from))", type: .integer) }
            let inner = Scope(entity: destinationEntity, alias: alias, pathFromRoot: nil)
            guard case .scalar(let valueSQL, let valueType?, _) = try resolve(key, in: inner),
                [.integer, .double, .date].contains(valueType) || function == .min || function == .max
            else {
                throw .invalidParams(
                    "@\(function.rawValue) needs a numeric or date key of \(destinationEntity.name), got '\(key.joined(separator: "."))'",
                    field: "predicate")
            }
            switch function {
            case .sum: return Operand(sql: "(SELECT \(SQLiteSpelling.sum(valueSQL)) \(from))", type: .double)
            case .avg: return Operand(sql: "(SELECT \(SQLiteSpelling.average(valueSQL)) \(from))", type: .double)
            case .min:
                return Operand(
                    sql: "(SELECT \(SQLiteSpelling.extreme("MIN", valueSQL)) \(from))", type: valueType)
            default:
                return Operand(
                    sql: "(SELECT \(SQLiteSpelling.extreme("MAX", valueSQL)) \(from))", type: valueType)
            }
        case .subqueryCount(let collection, let variable, let predicate):
            guard
                case .collection(let owner, let relationship, let destinationEntity, let remainder, _) = try resolve(
                    collection, in: scope), remainder.isEmpty
            else {
                throw .invalidParams(
                    "SUBQUERY needs a to-many key path, got '\(collection.joined(separator: "."))'", field: "predicate")
            }
            let alias = makeAlias()
            let from = try members(of: relationship, destination: destinationEntity, alias: alias, owner: owner)
            var inner = scope
            inner.variables[variable] = (destinationEntity, alias)
            let condition = try compile(predicate, in: inner)
            return Operand(sql: "(SELECT COUNT(*) \(from) AND \(condition))", type: .integer)
        case .list:
            throw .invalidParams(
                "a list {…} can only follow IN or BETWEEN, at character \(position)", field: "predicate")
        }
    }

    /// A comparison of single values, as 0/1.
    /// Whether `expression` is a constant other than text or nil.
    private static func isNonTextConstant(_ expression: DepotProtocol.PredicateExpression) -> Bool {
        switch expression {
        case .value(.string), .value(.null): false
        case .value: true
        default: false
        }
    }

    private mutating func compileScalar(_ comparison: Comparison, in scope: Scope) throws(RPCError) -> String {
        let position = comparison.position
        if comparison.op == .in, let substring = try substringTest(comparison, in: scope) {
            return try compileScalar(substring, in: scope)
        }
        let left = try operand(comparison.lhs, in: scope, expecting: nil, destination: nil, position: position)
        let options = comparison.options
        if comparison.op == .in || comparison.op == .between {
            guard case .list(let elements) = comparison.rhs else {
                throw .invalidParams(
                    "\(comparison.op.rawValue) needs a list {…}, an array argument\(comparison.op == .in ? " or a string" : "") on the right, at character \(position)",
                    field: "predicate")
            }
            var values: [Operand] = []
            for element in elements {
                values.append(
                    try operand(
                        element, in: scope, expecting: left.type, destination: left.destination, position: position))
            }
            let lhs = fold(left, options, type: left.type)
            var folded: [String] = []
            for value in values { folded.append(fold(value, options, type: left.type, against: left)) }
            if comparison.op == .between {
                return SQLiteSpelling.orFalse("\(lhs) >= \(folded[0]) AND \(lhs) <= \(folded[1])")
            }
            // Still names the left side: its bound arguments (`NO IN {}`) must appear in the SQL.
            if values.isEmpty { return "(\(SQLiteSpelling.literal(false)) AND \(lhs) IS NULL)" }
            return "(" + folded.map { SQLiteSpelling.nullSafeEquals(lhs, $0) }.joined(separator: " OR ") + ")"
        }
        if comparison.op.isStringOperator, let type = left.type, type != .string {
            throw .invalidParams(
                "\(comparison.op.rawValue) compares strings, but the left side is \(type.rawValue), at character \(position)",
                field: "predicate")
        }
        let right = try operand(
            comparison.rhs, in: scope, expecting: left.type, destination: left.destination, position: position)
        try checkTypes(left, right, comparison)
        // MATCHES folds by its own rules (its pattern is not a string to fold).
        if comparison.op == .matches { return matches(left, right, comparison) }
        let lhs = fold(left, options, type: left.type ?? right.type, against: right)
        let rhs = fold(right, options, type: left.type ?? right.type, against: left)
        // A string operator on a constant that is not text (`4 BEGINSWITH ''`) is false, as the
        // evaluator has it; SQLite would compare the number's text. Still names both sides: their
        // bound arguments must appear in the SQL.
        if comparison.op.isStringOperator,
            Self.isNonTextConstant(comparison.lhs) || Self.isNonTextConstant(comparison.rhs)
        {
            return "(\(SQLiteSpelling.literal(false)) AND \(lhs) IS NULL AND \(rhs) IS NULL)"
        }
        switch comparison.op {
        case .equal: return SQLiteSpelling.isSame(lhs, rhs)
        case .notEqual: return SQLiteSpelling.isDistinct(lhs, rhs)
        case .less: return SQLiteSpelling.orFalse("\(lhs) < \(rhs)")
        case .lessOrEqual: return SQLiteSpelling.orFalse("\(lhs) <= \(rhs)")
        case .greater: return SQLiteSpelling.orFalse("\(lhs) > \(rhs)")
        case .greaterOrEqual: return SQLiteSpelling.orFalse("\(lhs) >= \(rhs)")
        case .beginsWith:
            if readsShadow(left, options), case .string? = right.constant?.storage {
                // A range over the shadow column's index narrows the rows; the exact test stays.
                // Text that begins with the prefix sorts before the prefix and 0xFF (never in UTF-8).
                return
                    "(\(lhs) >= \(rhs) AND \(lhs) < \(rhs) || CAST(X'FF' AS TEXT) AND \(SQLiteSpelling.beginsWith(lhs, rhs)))"
            }
            return SQLiteSpelling.beginsWith(lhs, rhs)
        case .endsWith: return SQLiteSpelling.endsWith(lhs, rhs)
        case .contains: return SQLiteSpelling.contains(lhs, rhs)
        case .like: return SQLiteSpelling.like(lhs, rhs)
        case .matches: return matches(left, right, comparison)
        case .in, .between: return SQLiteSpelling.literal(false)
        }
    }

    /// `MATCHES`: `depot_matches` (ICU through Foundation).
    private func matches(_ left: Operand, _ right: Operand, _ comparison: Comparison) -> String {
        SQLiteSpelling.orFalse("depot_matches(\(left.sql), \(right.sql), \(comparison.options.rawValue))")
    }

    /// Applies `[c]`/`[d]` folding to a string operand.
    private func fold(_ sql: String, _ options: Comparison.Options, type: AttributeType?) -> String {
        guard !options.isEmpty, type == nil || type == .string else { return sql }
        return SQLiteSpelling.fold(sql, options.rawValue)
    }

    /// Whether `[cd]` reads `operand`'s shadow column instead of folding its value.
    private func readsShadow(_ operand: Operand, _ options: Comparison.Options) -> Bool {
        operand.folded != nil && options == [.caseInsensitive, .diacriticInsensitive]
    }

    /// Applies `[c]`/`[d]` folding to `operand`, compared with `other`: a folded attribute
    /// under `[cd]` reads its shadow column, and a string constant compared with one is
    /// folded here, once, rather than by SQL (the same ``PredicateText/fold(_:_:)``).
    private mutating func fold(
        _ operand: Operand, _ options: Comparison.Options, type: AttributeType?, against other: Operand? = nil
    ) -> String {
        guard !options.isEmpty, type == nil || type == .string else { return operand.sql }
        if readsShadow(operand, options), let shadow = operand.folded { return shadow }
        if let other, readsShadow(other, options), let index = operand.argumentIndex,
            case .string(let text) = arguments[index - 1].storage
        {
            arguments[index - 1] = PredicateText.fold(text, options.rawValue).databaseValue
            return operand.sql
        }
        return fold(operand.sql, options, type: type)
    }

    private func checkTypes(_ left: Operand, _ right: Operand, _ comparison: Comparison) throws(RPCError) {
        if comparison.op.isStringOperator {
            for operand in [left, right] where !operand.isNullLiteral {
                if let type = operand.type, type != .string {
                    throw .invalidParams(
                        "\(comparison.op.rawValue) compares strings, but one side is \(type.rawValue), at character \(comparison.position)",
                        field: "predicate")
                }
            }
        }
        if [.less, .lessOrEqual, .greater, .greaterOrEqual].contains(comparison.op) {
            for operand in [left, right]
            where operand.type == .boolean || operand.type == .json || operand.type == .binary
                || (operand.type == nil && operand.destination != nil)
            {
                throw .invalidParams(
                    "\(comparison.op.rawValue) cannot order \(operand.type?.rawValue ?? "relationship") values, at character \(comparison.position)",
                    field: "predicate")
            }
        }
        if let leftType = left.type, let rightType = right.type {
            let numeric: Set<AttributeType> = [.integer, .double]
            if leftType != rightType && !(numeric.contains(leftType) && numeric.contains(rightType)) {
                throw .invalidParams(
                    "cannot compare \(leftType.rawValue) with \(rightType.rawValue) at character \(comparison.position)",
                    field: "predicate")
            }
        }
    }

    /// A constant as the stored form of `type` (or of a reference to `destination`).
    func typedValue(_ value: JSONValue, type: AttributeType?, destination: EntitySchema?, position: Int)
        throws(RPCError) -> DatabaseValue
    {
        func mismatch(_ expected: String) -> RPCError {
            .invalidParams(
                "type mismatch at character \(position): expected \(expected), got \(value.excerpt())",
                field: "predicate")
        }
        if let destination {
            guard case .string(let text) = value, let id = ObjectID(text), id.entity == destination.name else {
                throw mismatch("an id of a \(destination.name) such as \"\(destination.name)/1\"")
            }
            return id.row.databaseValue
        }
        switch type {
        case nil:
            switch value {
            case .bool(let flag): return (flag ? 1 : 0).databaseValue
            case .int(let number): return number.databaseValue
            case .double(let number): return number.databaseValue
            case .string(let text):
                // As below: a literal of unknown type (`teamName IN 'a\0b'`) is bound as text too.
                guard !text.utf8.contains(0) else { throw mismatch("a string without U+0000 (NUL)") }
                return text.databaseValue
            default: return String(decoding: JSONWriter.encode(value), as: UTF8.self).databaseValue
            }
        case .string?:
            guard case .string(let text) = value else { throw mismatch("a string") }
            // SQLite's text binding ends at U+0000 (as in ValueCoding): refuse rather than compare a shorter string.
            guard !text.utf8.contains(0) else { throw mismatch("a string without U+0000 (NUL)") }
            return text.databaseValue
        case .integer?, .double?:
            switch value {
            case .int(let number): return number.databaseValue
            case .double(let number): return number.databaseValue
            case .bool(let flag): return (flag ? 1 : 0).databaseValue
            default: throw mismatch("a number")
            }
        case .boolean?:
            switch value {
            case .bool(let flag): return (flag ? 1 : 0).databaseValue
            case .int(let number) where number == 0 || number == 1: return number.databaseValue
            default: throw mismatch("a boolean (YES, NO, true, false)")
            }
        case .date?:
            if case .string(let text) = value, let seconds = ISO8601.seconds(from: text) {
                return seconds.databaseValue
            }
            if let seconds = value.doubleValue { return seconds.databaseValue }
            throw mismatch("an ISO 8601 date string such as \"2026-11-22T10:15:30.250Z\"")
        case let other?:
            do {
                return try ValueCoding.databaseValue(value, type: other)
            } catch {
                throw mismatch(error.expected)
            }
        }
    }
}
