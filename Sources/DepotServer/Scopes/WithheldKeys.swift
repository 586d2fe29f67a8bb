import DepotProtocol
import DepotStore

/// The relationships a key cannot see (DESIGN.md §2): an entity its read scope hides
/// (`FALSEPREDICATE`) does not exist for it, and neither do the relationships to that entity.
///
/// Fetches and live results leave them out by reading through ``Schema/visible(to:)``; this
/// removes them where keys travel by name past the store: `store/didSave`'s values and the
/// changed keys of its and `store/history`'s updates.
struct WithheldKeys: Sendable {
    /// The withheld relationships' names by entity (model names: validated ASCII identifiers).
    let byEntity: [String: Set<String>]

    /// The relationships of `schema` to the entities `hides` says the key cannot read.
    init(schema: Schema, hides: (String) -> Bool) {
        var byEntity: [String: Set<String>] = [:]
        for entity in schema.entities where !hides(entity.name) {
            let names = entity.description.relationships.filter { hides($0.destination) }.map(\.name)
            if !names.isEmpty { byEntity[entity.name] = Set(names) }
        }
        self.byEntity = byEntity
    }

    /// Whether nothing is withheld.
    var isEmpty: Bool { byEntity.isEmpty }

    /// `changes` without the withheld keys among its updates' changed keys.
    func filter(_ changes: [String: EntityChanges]) -> [String: EntityChanges] {
        guard !isEmpty else { return changes }
        var changes = changes
        for (entity, names) in byEntity {
            guard var entityChanges = changes[entity] else { continue }
            for index in entityChanges.updated.indices {
                entityChanges.updated[index].keys.removeAll { names.contains($0) }
            }
            changes[entity] = entityChanges
        }
        return changes
    }

    /// `object`, of `entity`, without the withheld keys.
    func filter(_ object: JSONValue, entity: String) -> JSONValue {
        guard let names = byEntity[entity], case .object(var members) = object else { return object }
        for name in names { members[name] = nil }
        return .object(members)
    }
}
