import DepotProtocol

/// A validated model, mapped to SQL tables: what every other part of the store reads.
///
/// Each entity is a table `"e_<Entity>"` with `id INTEGER PRIMARY KEY AUTOINCREMENT`
/// (ids are never reused), `_version`, one column per attribute and one per
/// to-one relationship (the destination's row number). A to-many relationship
/// has no column: when its inverse is to-one, it is the set of destination
/// rows whose inverse column points back; when its inverse is to-many too
/// (many-to-many), its pairs live in a ``JoinTable`` of their own.
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
        let model = Dictionary(entities.map { ($0.name, $0.description) }, uniquingKeysWith: { first, _ in first })
        self.entities = entities.map { EntitySchema($0.description, model: model) }
        self.byName = Dictionary(uniqueKeysWithValues: entities.enumerated().map { ($1.name, $0) })
    }

    /// The entity named `name`, or nil.
    public func entity(named name: String) -> EntitySchema? {
        // Names are ASCII identifiers; a dictionary would also find one by a canonically
        // equivalent spelling ("\u{212A}ey" for "Key"), which is another name (DESIGN.md §4).
        byName[name].map { entities[$0] }.flatMap { $0.name.bytesEqual(name) ? $0 : nil }
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
    /// Attributes by name (by its bytes: ``NameTable``).
    public let attributes: NameTable<AttributeDescription>
    /// To-one relationships by name (each has a column).
    public let toOne: NameTable<RelationshipDescription>
    /// To-many relationships by name (each is the inverse of a to-one).
    public let toMany: NameTable<RelationshipDescription>
    /// Names of stored columns besides `id` and `_version`, in order: attributes, then to-one relationships.
    public let columnKeys: [String]
    /// Each of ``columnKeys``' index, by key (what the save's statement cache keys columns by).
    let columnIndexes: [String: Int]
    /// The join tables of the many-to-many relationships (to-many with a to-many inverse), by relationship name.
    public let joins: NameTable<JoinTable>

    /// The entity alone; its many-to-many relationships are known once it is part of a ``Schema``.
    init(_ description: EntityDescription) {
        self.init(description, model: [:])
    }

    /// The entity within `model` (entities by name), which tells which to-many relationships are many-to-many.
    init(_ description: EntityDescription, model: [String: EntityDescription]) {
        self.description = description
        attributes = NameTable(description.attributes.map { ($0.name, $0) })
        toOne = NameTable(description.relationships.filter { !$0.toMany }.map { ($0.name, $0) })
        toMany = NameTable(description.relationships.filter(\.toMany).map { ($0.name, $0) })
        columnKeys = description.attributes.map(\.name) + description.relationships.filter { !$0.toMany }.map(\.name)
        columnIndexes = Dictionary(columnKeys.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        var joins: [String: JoinTable] = [:]
        for relationship in description.relationships where relationship.toMany {
            guard let inverse = relationship.inverse,
                model[relationship.destination]?.relationship(named: inverse)?.toMany == true
            else { continue }
            joins[relationship.name] = JoinTable(
                entity: description.name, relationship: relationship.name, destination: relationship.destination,
                inverse: inverse)
        }
        self.joins = NameTable(joins.map { ($0.key, $0.value) })
    }

    /// The entity's name.
    public var name: String { description.name }

    /// The table's quoted name.
    public var table: String { Self.quote("e_" + description.name) }

    /// The table's unquoted name.
    public var tableName: String { "e_" + description.name }

    /// The quoted column of an attribute or to-one relationship.
    public func column(_ key: String) -> String { Self.quote(key) }

    /// The quoted shadow column of a `folded` attribute, holding the value folded for `[cd]`,
    /// or nil when `key` is not folded. Triggers keep it right on every write (the model
    /// migrator makes them), so no write path has to know of it.
    public func foldedColumn(_ key: String) -> String? {
        attributes[key]?.folded == true ? Self.quote(Self.foldedColumnName(key)) : nil
    }

    /// The unquoted name of `key`'s shadow column; `#` keeps it apart from every model key.
    static func foldedColumnName(_ key: String) -> String { key + "#folded" }

    /// Whether a table column is a shadow column (``foldedColumn(_:)``): derived, never an object's
    /// value, so the cluster's object tables and checksums leave it out (each store computes its own).
    public static func isShadowColumn(_ name: String) -> Bool { name.utf8.contains(UInt8(ascii: "#")) }

    /// The SQL that folds `key`'s value (of the row `row`, or the statement's own) for `[cd]`.
    static func foldExpression(_ key: String, row: String? = nil) -> String {
        "depot_fold(\(row.map { $0 + "." } ?? "")\(quote(key)), 3)"
    }

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
        // Foundation's replacingOccurrences is costly on a save's hot path: only when needed.
        guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
        return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

/// The table holding the pairs of one many-to-many relationship and its inverse.
///
/// One table serves both sides: `"j_<Entity>.<relationship>"` named after the
/// side that sorts first by (entity, relationship), with column `a` holding
/// that side's rows and `b` the other side's; primary key (a, b), and an index
/// on (b, a). Seen from either side, ``ownerColumn`` holds the side's own rows
/// and ``memberColumn`` the related ones.
public struct JoinTable: Sendable, Hashable {
    /// The table's unquoted name.
    public let name: String
    /// The column holding the rows of the entity whose relationship this is (`a` or `b`).
    public let ownerColumn: String
    /// The column holding the related rows (`b` or `a`).
    public let memberColumn: String

    /// The join table of `entity.relationship`, whose inverse is `destination.inverse`.
    public init(entity: String, relationship: String, destination: String, inverse: String) {
        let first = (entity, relationship) <= (destination, inverse)
        name = first ? "j_\(entity).\(relationship)" : "j_\(destination).\(inverse)"
        ownerColumn = first ? "a" : "b"
        memberColumn = first ? "b" : "a"
    }

    /// The table's quoted name.
    public var table: String { EntitySchema.quote(name) }

    /// Whether the owner's rows are in column `a` (the side the table is named after).
    public var isFirstSide: Bool { ownerColumn == "a" }
}
