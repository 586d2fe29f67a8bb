import DepotProtocol
import DepotStore

/// `store/history` through one key's read scope (DESIGN.md §2, Row-level
/// scopes): each transaction says what `store/didSave` to that key's observer
/// said when it committed, judged exactly on the values the scope's keys had
/// before and after (recorded with the transaction, ``RecordedValues``):
/// - an insert in scope, or an update into the scope, is `inserted`;
/// - an update in scope before and after is `updated`;
/// - a delete, or an update out of the scope, of an object in scope before is `deleted`;
/// - a transaction with none of these is left out.
struct HistoryScope {
    /// One scoped entity's read rule.
    private struct Rule {
        /// The bound predicate; `FALSEPREDICATE` hides the entity.
        var predicate: PredicateNode
        /// The rule as the policy wrote it.
        var text: String
        /// The entity's own keys it reads.
        var keys: Set<String>
    }

    private let keyName: String
    private let rules: [String: Rule]
    private let evaluator: PredicateEvaluator

    /// The history filter of `key`'s `scope` over `schema`.
    ///
    /// - Throws: -32018 naming the rule when one reads through a relationship:
    ///   history records only the entity's own keys, so it cannot be judged.
    init(key: AuthorizedKey, scope: KeyScope, schema: Schema) throws(RPCError) {
        keyName = key.name
        var rules: [String: Rule] = [:]
        for (name, entityRules) in scope.entities {
            guard let read = entityRules.read else { continue }
            let text = entityRules.readText ?? ""
            guard read != .constant(false) else {
                rules[name] = Rule(predicate: read, text: text, keys: [])
                continue
            }
            // An entity the model does not have has no history yet.
            guard let entity = schema.entity(named: name) else { continue }
            let compiled = try? PredicateCompilation.compile(node: read, entity: entity, schema: schema)
            guard let keys = Self.ownKeys(of: read), let compiled, compiled.dependencies.isEmpty else {
                throw RPCError(
                    code: .forbidden,
                    message:
                        "'store/history' is not supported with key '\(key.name)': \(name)'s read rule '\(text)' reads through a relationship, and history records only an object's own keys",
                    data: [
                        "method": .string(StoreHistory.name), "entity": .string(name), "rule": .string(text),
                        "key": .string(key.name),
                    ])
            }
            rules[name] = Rule(predicate: read, text: text, keys: keys)
        }
        self.rules = rules
        evaluator = PredicateEvaluator(model: schema.descriptions, object: { _ in nil }, toMany: { _, _ in [] })
    }

    /// The keys a rule reads when it reads only its object's own keys
    /// (attributes, to-one ids, `SELF`); `nil` when it follows a relationship.
    static func ownKeys(of node: PredicateNode) -> Set<String>? {
        switch node {
        case .constant: return []
        case .not(let inner): return ownKeys(of: inner)
        case .and(let parts), .or(let parts):
            var keys: Set<String> = []
            for part in parts {
                guard let found = ownKeys(of: part) else { return nil }
                keys.formUnion(found)
            }
            return keys
        case .comparison(let comparison):
            guard let left = ownKeys(of: comparison.lhs), let right = ownKeys(of: comparison.rhs) else { return nil }
            return left.union(right)
        }
    }

    private static func ownKeys(of expression: PredicateExpression) -> Set<String>? {
        switch expression {
        case .value: return []
        case .keyPath(let path):
            guard path.count == 1, let key = path.first, !key.hasPrefix("$") else { return nil }
            return key == "SELF" ? [] : [key]
        case .list(let elements):
            var keys: Set<String> = []
            for element in elements {
                guard let found = ownKeys(of: element) else { return nil }
                keys.formUnion(found)
            }
            return keys
        case .aggregate, .subqueryCount: return nil
        }
    }

    /// The keys history must record, by entity, for every read rule of `scopes`
    /// that reads only its object's own keys.
    static func recordedKeys(of scopes: [KeyScope]) -> [String: Set<String>] {
        var keys: [String: Set<String>] = [:]
        for scope in scopes {
            for (entity, rules) in scope.entities {
                guard let read = rules.read, read != .constant(false), let found = ownKeys(of: read) else { continue }
                keys[entity, default: []].formUnion(found)
            }
        }
        return keys
    }

    /// Whether `entry` was recorded with every value the key's read rules read
    /// for the entities it changed (not so before a policy that reads them).
    func judges(_ entry: Store.HistoryEntry) -> Bool {
        entry.changes.allSatisfy { name, set in
            guard let rule = rules[name], rule.predicate != .constant(false) else { return true }
            guard let recorded = set.recorded else { return false }
            return rule.keys.isSubset(of: recorded.keys)
                && set.allRows.allSatisfy { recorded.rows[$0] != nil }
        }
    }

    /// What the key may see of `entry`: `nil` when nothing.
    ///
    /// - Throws: -32602 (`since`) when the entry was recorded without the values
    ///   the current scope reads (history from before a policy that reads them).
    func changes(of entry: Store.HistoryEntry) throws(RPCError) -> [String: EntityChanges]? {
        var result: [String: EntityChanges] = [:]
        for (name, set) in entry.changes {
            guard let rule = rules[name] else {
                result[name] = set.wire
                continue
            }
            if rule.predicate == .constant(false) { continue }
            guard let recorded = set.recorded, rule.keys.isSubset(of: recorded.keys) else {
                throw unjudged(entry.number, entity: name, rule: rule)
            }
            func inScope(_ row: Int64, _ values: [JSONValue]?) throws(RPCError) -> Bool {
                guard let values else { return false }
                return try evaluator.evaluate(
                    rule.predicate, on: recorded.object(values, entity: name, row: row), entity: name)
            }
            func change(_ row: Int64) throws(RPCError) -> RecordedValues.Change {
                guard let change = recorded.rows[row] else { throw unjudged(entry.number, entity: name, rule: rule) }
                return change
            }
            // In the order the observer reports them: inserts, then updates into the scope; updates out, then deletes.
            var seen = EntityChanges(inserted: [], updated: [], deleted: [])
            for row in set.inserted where try inScope(row, change(row).after) {
                seen.inserted.append("\(name)/\(row)")
            }
            var left: [String] = []
            for (row, keys) in set.updated {
                let values = try change(row)
                switch (try inScope(row, values.before), try inScope(row, values.after)) {
                case (true, true): seen.updated.append(EntityChanges.Update(id: "\(name)/\(row)", keys: keys.sorted()))
                case (false, true): seen.inserted.append("\(name)/\(row)")
                case (true, false): left.append("\(name)/\(row)")
                case (false, false): break
                }
            }
            seen.deleted = left
            for row in set.deleted where try inScope(row, change(row).before) {
                seen.deleted.append("\(name)/\(row)")
            }
            if !(seen.inserted.isEmpty && seen.updated.isEmpty && seen.deleted.isEmpty) { result[name] = seen }
        }
        return result.isEmpty ? nil : result
    }

    /// -32602: `transaction` was recorded without the values `rule` reads.
    private func unjudged(_ transaction: Int64, entity: String, rule: Rule) -> RPCError {
        unjudged(through: transaction, detail: "\(entity)'s read rule '\(rule.text)'")
    }

    /// -32602 (`since`): history through `transaction` was recorded without the values
    /// the current scope reads (before a policy that reads them), so it cannot be judged.
    func unjudged(through transaction: Int64, detail: String = "its read rules") -> RPCError {
        RPCError(
            code: .invalidParams,
            message:
                "history before \(transaction + 1) cannot be judged under the current scope of key '\(keyName)': it was recorded without the values \(detail) reads (a policy that reads them came later); ask since >= \(transaction)",
            data: ["field": .string("since"), "since": .int(transaction)])
    }
}
