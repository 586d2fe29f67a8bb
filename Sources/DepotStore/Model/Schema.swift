import DepotProtocol

/// A validated model, mapped to SQL tables: what every other part of the store reads.
///
/// Each entity is a table `"e_<Entity>"` with `id INTEGER PRIMARY KEY AUTOINCREMENT`
/// (ids are never reused), `_version`, one column per attribute and one per
/// to-one relationship (the destination's row number). A to-many relationship
/// has no column: it is the set of destination rows whose inverse to-one
/// column points back.
public struct Schema: Sendable {
    /// The model's version; grows with every definition that changed something.
    public let version: Int64
    /// The entities in declaration order.
    public let entities: [EntitySchema]
    private let byName: [String: Int]

    /// The empty model.
    public static let empty = Schema(version: 0, entities: [])

    init(version: Int64, entities: [EntitySchema]) {
        self.version = version
        self.entities = entities
        self.byName = Dictionary(uniqueKeysWithValues: entities.enumerated().map { ($1.name, $0) })
    }

    /// The entity named `name`, or nil.
    public func entity(named name: String) -> EntitySchema? {
        byName[name].map { entities[$0] }
    }

    /// The entity named `name`, or -32602 naming it.
    public func entity(_ name: String, field: String = "entity") throws(RPCError) -> EntitySchema {
        guard let entity = entity(named: name) else {
            let known = entities.map(\.name).joined(separator: ", ")
            throw .invalidParams(
                "unknown entity '\(name)' (the model has: \(known.isEmpty ? "no entities" : known))", field: field)
        }
        return entity
    }

    /// The descriptions, as `model/get` returns them.
    public var descriptions: [EntityDescription] { entities.map(\.description) }
}

/// One entity of a ``Schema``, with its SQL names.
public struct EntitySchema: Sendable {
    /// The entity as defined.
    public let description: EntityDescription
    /// Attributes by name.
    public let attributes: [String: AttributeDescription]
    /// To-one relationships by name (each has a column).
    public let toOne: [String: RelationshipDescription]
    /// To-many relationships by name (each is the inverse of a to-one).
    public let toMany: [String: RelationshipDescription]
    /// Names of stored columns besides `id` and `_version`, in order: attributes, then to-one relationships.
    public let columnKeys: [String]

    init(_ description: EntityDescription) {
        self.description = description
        attributes = Dictionary(uniqueKeysWithValues: description.attributes.map { ($0.name, $0) })
        toOne = Dictionary(uniqueKeysWithValues: description.relationships.filter { !$0.toMany }.map { ($0.name, $0) })
        toMany = Dictionary(uniqueKeysWithValues: description.relationships.filter(\.toMany).map { ($0.name, $0) })
        columnKeys = description.attributes.map(\.name) + description.relationships.filter { !$0.toMany }.map(\.name)
    }

    /// The entity's name.
    public var name: String { description.name }

    /// The table's quoted name.
    public var table: String { Self.quote("e_" + description.name) }

    /// The table's unquoted name.
    public var tableName: String { "e_" + description.name }

    /// The quoted column of an attribute or to-one relationship.
    public func column(_ key: String) -> String { Self.quote(key) }

    /// Whether `key` is an attribute or relationship of the entity.
    public func hasKey(_ key: String) -> Bool {
        attributes[key] != nil || toOne[key] != nil || toMany[key] != nil
    }

    /// All attribute and relationship names, for error messages.
    public var keyList: String {
        (description.attributes.map(\.name) + description.relationships.map(\.name)).joined(separator: ", ")
    }

    /// Quotes an identifier for SQL. Names are validated to be plain identifiers
    /// when the model is defined, so this only guards keywords.
    public static func quote(_ identifier: String) -> String {
        "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
