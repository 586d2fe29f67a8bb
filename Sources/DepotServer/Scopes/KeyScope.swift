import DepotProtocol
import DepotStore

/// One key's row-level scope: its role's predicates with `$keyName` and the
/// key's `$<attr>` bound as values (DESIGN.md §2). Bound at load time, so a
/// scope is a fixed tree that a request can only narrow.
public struct KeyScope: Sendable, Hashable {
    /// One entity's bound predicates; `nil` is unrestricted (`TRUEPREDICATE`).
    public struct Rules: Sendable, Hashable {
        /// Which objects exist for the key.
        public var read: PredicateNode?
        /// Which objects the key may insert, update and delete.
        public var write: PredicateNode?
        /// The read rule as the policy wrote it, for errors and `server/stats`.
        public var readText: String?
        /// The write rule as the policy wrote it.
        public var writeText: String?
    }

    /// The policy role's name.
    public var role: String
    /// The rules by entity; an entity not listed is unrestricted.
    public var entities: [String: Rules]

    /// Binds `role`'s rules for the key named `keyName` with `attributes`.
    ///
    /// - Throws: naming the role, entity and rule, when a predicate does not
    ///   parse or names a variable the key line does not give.
    init(role: String, rules: AccessPolicy.ScopedRole, keyName: String, attributes: [String: String])
        throws(ConfigurationError)
    {
        var bindings: [String: JSONValue] = attributes.mapValues { .string($0) }
        bindings["keyName"] = .string(keyName)
        self.role = role
        var entities: [String: Rules] = [:]
        for (entity, texts) in rules.entities {
            func bind(_ text: String?, _ which: String) throws(ConfigurationError) -> PredicateNode? {
                guard let text else { return nil }
                do {
                    let node = try PredicateParser.parse(text, arguments: .object(bindings))
                    return node == .constant(true) ? nil : node
                } catch {
                    throw ConfigurationError(
                        description:
                            "role '\(role)', \(entity).\(which) '\(text)' for key '\(keyName)': \(error.message)")
                }
            }
            entities[entity] = Rules(
                read: try bind(texts.read, "read"), write: try bind(texts.write, "write"), readText: texts.read,
                writeText: texts.write)
        }
        self.entities = entities
    }

    /// The read scope of `entity`, `nil` when it is unrestricted.
    public func read(_ entity: String) -> PredicateNode? { entities[entity]?.read }

    /// The write scope of `entity`, `nil` when it is unrestricted.
    public func write(_ entity: String) -> PredicateNode? { entities[entity]?.write }

    /// The write rules as the store checks them in a save, `nil` when no entity has one.
    func writeScope(keyName: String) -> WriteScope? {
        var rules: [String: WriteScope.Rule] = [:]
        for (entity, rule) in entities {
            if let write = rule.write { rules[entity] = WriteScope.Rule(predicate: write, text: rule.writeText ?? "") }
        }
        return rules.isEmpty ? nil : WriteScope(rules: rules, keyName: keyName)
    }

    /// Whether the key can see no object of `entity` at all (left out of `model/get`).
    public func hides(_ entity: String) -> Bool { read(entity) == .constant(false) }

    /// Checks the rules of the entities `schema` has (their key paths and types), naming the rule that fails.
    func validate(against schema: Schema) throws(ConfigurationError) {
        for (name, rules) in entities.sorted(by: { $0.key < $1.key }) {
            // An entity the model does not have yet (defined later with model/define) is checked when used.
            guard let entity = schema.entity(named: name) else { continue }
            for (which, node, text) in [("read", rules.read, rules.readText), ("write", rules.write, rules.writeText)] {
                guard let node else { continue }
                do {
                    _ = try PredicateCompilation.compile(node: node, entity: entity, schema: schema)
                } catch {
                    throw ConfigurationError(
                        description: "role '\(role)', \(name).\(which) '\(text ?? "")': \(error.message)")
                }
            }
        }
    }

    /// The scope as `server/stats` shows it: the rule texts by entity.
    var summary: JSONValue {
        .object(
            entities.mapValues { rules in
                var members: [String: JSONValue] = [:]
                if let read = rules.readText { members["read"] = .string(read) }
                if let write = rules.writeText { members["write"] = .string(write) }
                return .object(members)
            })
    }
}
