import DepotProtocol

/// What a migration from one model to the next did to the keys objects carry,
/// as live results follow it (DESIGN.md §7, Across a migration): worked out
/// from the two schemas alone, so that a daemon that applied the migration from
/// a cluster's log knows it as well as the one that ran it.
///
/// A renamed entity or key is one the new schema has under a new name whose
/// `renamedFrom` names one the old schema had and the new one no longer has
/// (removals are refused, so a name gone is a rename).
public struct ModelMigration: Sendable {
    /// The model version before.
    public let from: Int64
    /// The model version after.
    public let to: Int64
    /// Renamed entities: old name → new name.
    public private(set) var renamedEntities: [String: String] = [:]
    /// Per entity (by its new name): renamed keys, old name → new name.
    public private(set) var renamedKeys: [String: [String: String]] = [:]
    /// Per entity (by its new name): added attributes with a non-nil default, set in every row.
    public private(set) var filledKeys: [String: Set<String>] = [:]

    /// The migration from `old` to `new`.
    public init(from old: Schema, to new: Schema) {
        from = old.version
        to = new.version
        let newNames = Set(new.entities.map(\.name))
        for entity in new.entities {
            var previous = old.entity(named: entity.name)
            if previous == nil, let source = entity.description.renamedFrom, !newNames.contains(source),
                let renamed = old.entity(named: source)
            {
                renamedEntities[source] = entity.name
                previous = renamed
            }
            guard let previous else { continue }
            let description = entity.description
            var renamed: [String: String] = [:]
            let sources =
                description.attributes.map { ($0.name, $0.renamedFrom) }
                + description.relationships.map { ($0.name, $0.renamedFrom) }
            let newKeys = Set(sources.map(\.0))
            let oldKeys = Set(previous.columnKeys + previous.toMany.keys)
            for (name, source) in sources where !oldKeys.contains(name) {
                guard let source, oldKeys.contains(source), !newKeys.contains(source) else { continue }
                renamed[source] = name
            }
            if !renamed.isEmpty { renamedKeys[entity.name] = renamed }
            let filled = description.attributes.filter { attribute in
                !oldKeys.contains(attribute.name) && !renamed.values.contains(attribute.name)
                    && attribute.defaultValue.map { !$0.isNull } == true
            }
            if !filled.isEmpty { filledKeys[entity.name] = Set(filled.map(\.name)) }
        }
    }

    /// Whether the migration changed nothing live results can see.
    public var isEmpty: Bool { renamedEntities.isEmpty && renamedKeys.isEmpty && filledKeys.isEmpty }

    /// The keys of `entity` (of the new schema) whose values the migration changed in every
    /// object: renamed keys, filled attributes, and relationships to a renamed entity (their ids name it).
    public func changedKeys(of entity: EntitySchema) -> Set<String> {
        var keys = filledKeys[entity.name] ?? []
        if let renamed = renamedKeys[entity.name] { keys.formUnion(renamed.values) }
        let renamedDestinations = Set(renamedEntities.values)
        for relationship in entity.description.relationships
        where renamedDestinations.contains(relationship.destination) {
            keys.insert(relationship.name)
        }
        return keys
    }
}
