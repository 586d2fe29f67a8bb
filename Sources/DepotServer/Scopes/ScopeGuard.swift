import DepotProtocol
import DepotStore

/// Checks the key paths of one key's requests against its ``KeyScope``
/// (DESIGN.md §2, Row-level scopes): refuses those that would probe rows it
/// reads only through a scope. ``StoreView`` runs it before every scoped read.
struct ScopeGuard: Sendable {
    /// The key's scope.
    let scope: KeyScope
    /// The key's name, for errors.
    let keyName: String
    /// The model the requests are read against.
    let schema: Schema

    /// Refuses (-32018) a prefetch key path that crosses into an entity the key cannot read at all
    /// (DESIGN.md §5, Prefetching); an entity it reads through a scope is prefetched in that scope.
    /// Keys that are not relationships are left to the store's -32602.
    func checkPrefetch(_ paths: [String], entity: EntitySchema, field: String) throws(RPCError) {
        for (index, path) in paths.enumerated() {
            var current = entity
            for key in split(path) {
                guard let relationship = current.toOne[key] ?? current.toMany[key],
                    let next = schema.entity(named: relationship.destination)
                else { break }
                if scope.hides(next.name) {
                    throw RPCError(
                        code: .forbidden,
                        message:
                            "the prefetch key path '\(path)' crosses '\(key)' into an entity key '\(keyName)' (role '\(scope.role)') cannot read",
                        data: ["field": .string("\(field)[\(index)]"), "role": .string(scope.role), "key": .string(keyName)])
                }
                current = next
            }
        }
    }

    /// Refuses (-32018) a predicate, sort, property, groupBy or aggregate key path
    /// that crosses a relationship into an entity whose read scope is not `TRUEPREDICATE`.
    func checkPaths(of request: FetchRequest, entity: EntitySchema, field: String) throws(RPCError) {
        if let text = request.predicate, !text.allSatisfy(\.isWhitespace) {
            // A predicate that does not parse is the store's -32014 to report; nothing to probe with.
            if let node = try? PredicateParser.parse(text, arguments: request.arguments) {
                try check(node, entity: entity, field: "\(field).predicate")
            }
        }
        for (index, descriptor) in (request.sort ?? []).enumerated() {
            try check(path: split(descriptor.key), entity: entity, field: "\(field).sort[\(index)].key")
        }
        for (index, property) in (request.properties ?? []).enumerated() {
            try check(path: split(property), entity: entity, field: "\(field).properties[\(index)]")
        }
        for (index, key) in (request.groupBy ?? []).enumerated() {
            try check(path: split(key), entity: entity, field: "\(field).groupBy[\(index)]")
        }
        for (index, aggregate) in (request.aggregates ?? []).enumerated() {
            guard let key = aggregate.key else { continue }
            try check(path: split(key), entity: entity, field: "\(field).aggregates[\(index)].key")
        }
        if let paths = request.prefetch { try checkPrefetch(paths, entity: entity, field: "\(field).prefetch") }
    }

    private func split(_ keyPath: String) -> [String] {
        keyPath.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    }

    private func check(_ node: PredicateNode, entity: EntitySchema, field: String) throws(RPCError) {
        switch node {
        case .constant: return
        case .not(let inner): try check(inner, entity: entity, field: field)
        case .and(let parts), .or(let parts):
            for part in parts { try check(part, entity: entity, field: field) }
        case .comparison(let comparison):
            try check(comparison.lhs, entity: entity, field: field)
            try check(comparison.rhs, entity: entity, field: field)
        }
    }

    private func check(_ expression: PredicateExpression, entity: EntitySchema, field: String) throws(RPCError) {
        switch expression {
        case .value: return
        case .keyPath(let path):
            // Inside a SUBQUERY (checked with `entity` its collection's destination), a
            // `$variable` path starts at the collection's object.
            guard let first = path.first else { return }
            try check(path: first.hasPrefix("$") ? Array(path.dropFirst()) : path, entity: entity, field: field)
        case .list(let elements):
            for element in elements { try check(element, entity: entity, field: field) }
        case .aggregate(_, let collection, let key):
            try check(path: collection + key, entity: entity, field: field, crossingEnd: true)
        case .subqueryCount(let collection, _, let predicate):
            try check(path: collection, entity: entity, field: field, crossingEnd: true)
            if let destination = destination(of: collection, from: entity) {
                try check(predicate, entity: destination, field: field)
            }
        }
    }

    /// The entity a relationship key path ends in, if it is one.
    private func destination(of path: [String], from entity: EntitySchema) -> EntitySchema? {
        var current = entity
        for key in path where key.uppercased() != "SELF" {
            guard let relationship = current.toOne[key] ?? current.toMany[key],
                let next = schema.entity(named: relationship.destination)
            else { return nil }
            current = next
        }
        return current
    }

    /// Refuses `path` when it reads through a relationship into a scoped entity:
    /// a relationship followed by more keys, a to-many one, or (`crossingEnd`,
    /// for `@count` and SUBQUERY) one that ends the path. A to-one relationship
    /// that ends a plain path is the object's own column (an id) and is allowed.
    private func check(path: [String], entity: EntitySchema, field: String, crossingEnd: Bool = false)
        throws(RPCError)
    {
        var current = entity
        for (index, key) in path.enumerated() {
            guard let relationship = current.toOne[key] ?? current.toMany[key] else {
                if key.uppercased() == "SELF" { continue }
                return
            }
            let probes = index < path.count - 1 || crossingEnd || relationship.toMany
            if probes, scope.hides(relationship.destination) {
                // An entity the key cannot read does not exist for it: the error does not name it.
                throw RPCError(
                    code: .forbidden,
                    message:
                        "the key path '\(path.joined(separator: "."))' crosses '\(key)' into objects that key '\(keyName)' (role '\(scope.role)') cannot read",
                    data: ["field": .string(field), "role": .string(scope.role), "key": .string(keyName)])
            }
            if probes, scope.read(relationship.destination) != nil {
                throw RPCError(
                    code: .forbidden,
                    message:
                        "the key path '\(path.joined(separator: "."))' crosses '\(key)' into \(relationship.destination), which key '\(keyName)' (role '\(scope.role)') reads only through a scope; query \(relationship.destination) directly",
                    data: [
                        "field": .string(field), "entity": .string(relationship.destination),
                        "role": .string(scope.role), "key": .string(keyName),
                    ])
            }
            guard let next = schema.entity(named: relationship.destination) else { return }
            current = next
        }
    }
}
