import DepotProtocol
import GRDB

/// The write scope a save runs under (DESIGN.md §2, Row-level scopes): per
/// entity, a predicate every object the save inserts, updates or deletes must
/// satisfy, before (updates, deletes, uniqueness merges) and after (inserts, updates).
public struct WriteScope: Sendable {
    /// One entity's rule: the bound predicate and its text for errors.
    public struct Rule: Sendable {
        /// The predicate, with the key's values bound.
        public var predicate: PredicateNode
        /// The rule as the policy wrote it.
        public var text: String

        /// Creates a rule.
        public init(predicate: PredicateNode, text: String) {
            self.predicate = predicate
            self.text = text
        }
    }

    /// The rules by entity; an entity not listed is unrestricted.
    public var rules: [String: Rule]
    /// The key's name, for errors.
    public var keyName: String
    /// The entities the key cannot read at all (read scope `FALSEPREDICATE`): a save naming one
    /// is refused as naming an unknown entity, since it does not exist for the key.
    public var hidden: Set<String> = []

    /// Creates a write scope.
    public init(rules: [String: Rule], keyName: String) {
        self.rules = rules
        self.keyName = keyName
    }

    /// No rule: every write is allowed (the daemon's own writes, unscoped keys, admin methods).
    public static let unrestricted = WriteScope(rules: [:], keyName: "")

    /// Whether no entity has a rule.
    public var isUnrestricted: Bool { rules.isEmpty && hidden.isEmpty }

    /// `entity`'s relationships to the entities the key cannot read: they do not exist for it
    /// either (DESIGN.md §2), so a write naming one is refused as naming an unknown key.
    public func withheldKeys(of entity: EntitySchema) -> Set<String> {
        guard !hidden.isEmpty else { return [] }
        return Set(entity.description.relationships.filter { hidden.contains($0.destination) }.map(\.name))
    }

    /// -32018 naming the entity, the object and the rule; for an object of an entity the key cannot
    /// read (changed as the other end of a relationship), naming none of them, since it does not
    /// exist for the key.
    func violation(_ id: ObjectID, rule: Rule, when: String) -> RPCError {
        guard !hidden.contains(id.entity) else {
            return RPCError(
                code: .forbidden,
                message:
                    "the save changes the other end of a relationship into objects that key '\(keyName)' cannot read; nothing was saved",
                data: ["key": .string(keyName)])
        }
        return RPCError(
            code: .forbidden,
            message:
                "\(id) is outside the write scope of key '\(keyName)' \(when): \(id.entity) must match '\(rule.text)'; nothing was saved",
            data: [
                "entity": .string(id.entity), "object": .string(id.description), "rule": .string(rule.text),
                "key": .string(keyName),
            ])
    }

    /// Throws for the first of `ids` that does not match its entity's rule in `db` now.
    func check(_ ids: [ObjectID], in db: Database, schema: Schema, when: String) throws {
        guard !rules.isEmpty else { return }
        var byEntity: [String: [Int64]] = [:]
        for id in ids where rules[id.entity] != nil && id.row > 0 { byEntity[id.entity, default: []].append(id.row) }
        for (name, rows) in byEntity.sorted(by: { $0.key < $1.key }) {
            guard let rule = rules[name], let entity = schema.entity(named: name) else { continue }
            let condition = try PredicateCompilation.compile(node: rule.predicate, entity: entity, schema: schema)
                .fragment
            // Rows are integers the save resolved, not client text; a big batch is checked in chunks.
            let unique = Array(Set(rows)).sorted()
            for start in stride(from: 0, to: unique.count, by: 5000) {
                let chunk = unique[start..<min(start + 5000, unique.count)]
                let list = chunk.map(String.init).joined(separator: ",")
                let sql = "SELECT t0.id FROM \(entity.table) AS t0 WHERE t0.id IN (\(list)) AND (\(condition.sql))"
                let matching = Set(
                    try Int64.fetchAll(db, sql: sql, arguments: StatementArguments(condition.arguments)))
                if let outside = chunk.first(where: { !matching.contains($0) }) {
                    throw violation(ObjectID(entity: name, row: outside), rule: rule, when: when)
                }
            }
        }
    }
}

extension SaveOperation {
    /// Before anything is written: every object the save will update or delete
    /// (cascades and uniqueness merges included) must be in the write scope.
    func checkScopeBefore(_ db: Database, deleting targets: [(ObjectID, EntitySchema)]) throws {
        let scope = writeScope
        guard !scope.isUnrestricted else { return }
        var ids = updates.map(\.id) + targets.map(\.0)
        for insert in inserts where insert.isUpsert {
            if let row = insert.row, row > 0 { ids.append(ObjectID(entity: insert.entity.name, row: row)) }
        }
        try scope.check(ids, in: db, schema: schema, when: "before the save")
    }

    /// After the writes, before the commit: every object inserted or updated must be in the write scope,
    /// and so must every object whose inverse relationship the save changed (the folder a note is filed
    /// into or taken out of, the other ends of a deleted object's relationships), as the save leaves it.
    func checkScopeAfter(_ db: Database) throws {
        let scope = writeScope
        guard !scope.isUnrestricted else { return }
        var ids = updates.map(\.id)
        for insert in inserts {
            if let row = insert.row, row > 0 { ids.append(ObjectID(entity: insert.entity.name, row: row)) }
        }
        ids += recorder.updatedRows
        try scope.check(ids, in: db, schema: schema, when: "after the save")
    }
}
