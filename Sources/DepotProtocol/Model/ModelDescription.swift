/// The type of an attribute (DESIGN.md §4).
public enum AttributeType: String, Codable, Sendable, CaseIterable {
    /// UTF-8 text.
    case string
    /// A 64-bit signed integer.
    case integer
    /// A double-precision number.
    case double
    /// `true` or `false`.
    case boolean
    /// An instant; ISO 8601 UTC on the wire, seconds since 1970 in storage.
    case date
    /// A UUID in its canonical text form.
    case uuid
    /// Bytes; base64 on the wire.
    case binary
    /// Any JSON value.
    case json
}

/// What happens to related objects when an object is deleted (Core Data's delete rules).
public enum DeleteRule: String, Codable, Sendable, CaseIterable {
    /// Clear the inverse reference (the default).
    case nullify
    /// Delete the related objects too.
    case cascade
    /// Refuse the delete while related objects exist (-32015).
    case deny
    /// Do nothing; references may dangle.
    case noAction
}

/// One attribute of an entity.
public struct AttributeDescription: Codable, Hashable, Sendable {
    /// The attribute's name; also its key in object values.
    public var name: String
    /// The value type.
    public var type: AttributeType
    /// Whether the value may be null (or absent) on save.
    public var optional: Bool
    /// The value used when an insert gives none.
    public var defaultValue: JSONValue?
    /// Whether to keep a single-column index on it.
    public var indexed: Bool
    /// For a string: whether to keep an indexed shadow column holding the value folded for
    /// `[cd]` (case and diacritics), which `[cd]` comparisons then read instead of folding every row.
    public var folded: Bool
    /// The attribute's name in the previous model version, for a rename migration.
    public var renamedFrom: String?

    /// Creates an attribute.
    public init(
        name: String, type: AttributeType, optional: Bool = false, defaultValue: JSONValue? = nil,
        indexed: Bool = false, folded: Bool = false, renamedFrom: String? = nil
    ) {
        self.name = name
        self.type = type
        self.optional = optional
        self.defaultValue = defaultValue
        self.indexed = indexed
        self.folded = folded
        self.renamedFrom = renamedFrom
    }

    enum CodingKeys: String, CodingKey {
        case name, type, optional, indexed, folded, renamedFrom
        case defaultValue = "default"
    }

    /// Encodes an attribute; `folded` only when set, so models without it read as before.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encode(type, forKey: .type)
        try container.encode(optional, forKey: .optional)
        try container.encodeIfPresent(defaultValue, forKey: .defaultValue)
        try container.encode(indexed, forKey: .indexed)
        if folded { try container.encode(true, forKey: .folded) }
        try container.encodeIfPresent(renamedFrom, forKey: .renamedFrom)
    }

    /// Decodes an attribute; `optional`, `indexed` and `folded` default to `false`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        type = try container.decode(AttributeType.self, forKey: .type)
        optional = try container.decodeIfPresent(Bool.self, forKey: .optional) ?? false
        defaultValue = try container.decodeIfPresent(JSONValue.self, forKey: .defaultValue)
        indexed = try container.decodeIfPresent(Bool.self, forKey: .indexed) ?? false
        folded = try container.decodeIfPresent(Bool.self, forKey: .folded) ?? false
        renamedFrom = try container.decodeIfPresent(String.self, forKey: .renamedFrom)
    }
}

/// One relationship of an entity.
public struct RelationshipDescription: Codable, Hashable, Sendable {
    /// The relationship's name; also its key in object values.
    public var name: String
    /// The entity at the other end.
    public var destination: String
    /// Whether it holds many objects (an array of ids) or one (an id or null).
    public var toMany: Bool
    /// The relationship on the destination that points back.
    public var inverse: String?
    /// What deleting this object does to the related ones.
    public var deleteRule: DeleteRule
    /// Whether a to-one relationship may be null on save.
    public var optional: Bool
    /// The relationship's name in the previous model version, for a rename migration.
    public var renamedFrom: String?

    /// Creates a relationship.
    public init(
        name: String, destination: String, toMany: Bool = false, inverse: String? = nil,
        deleteRule: DeleteRule = .nullify, optional: Bool = true, renamedFrom: String? = nil
    ) {
        self.name = name
        self.destination = destination
        self.toMany = toMany
        self.inverse = inverse
        self.deleteRule = deleteRule
        self.optional = optional
        self.renamedFrom = renamedFrom
    }

    enum CodingKeys: String, CodingKey {
        case name, destination, toMany, inverse, deleteRule, optional, renamedFrom
    }

    /// Decodes a relationship; `toMany` defaults to `false`, `deleteRule` to `nullify`, `optional` to `true`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        destination = try container.decode(String.self, forKey: .destination)
        toMany = try container.decodeIfPresent(Bool.self, forKey: .toMany) ?? false
        inverse = try container.decodeIfPresent(String.self, forKey: .inverse)
        deleteRule = try container.decodeIfPresent(DeleteRule.self, forKey: .deleteRule) ?? .nullify
        optional = try container.decodeIfPresent(Bool.self, forKey: .optional) ?? true
        renamedFrom = try container.decodeIfPresent(String.self, forKey: .renamedFrom)
    }
}

/// One entity: a kind of object with attributes and relationships.
public struct EntityDescription: Codable, Hashable, Sendable {
    /// The entity's name, as in object ids (`Team/42`).
    public var name: String
    /// The attributes, in declaration order.
    public var attributes: [AttributeDescription]
    /// The relationships, in declaration order.
    public var relationships: [RelationshipDescription]
    /// Sets of attribute names whose combined values must be unique.
    public var uniquenessConstraints: [[String]]
    /// Compound indexes, each a list of attribute names.
    public var indexes: [[String]]
    /// The entity's name in the previous model version, for a rename migration.
    public var renamedFrom: String?

    /// Creates an entity.
    public init(
        name: String, attributes: [AttributeDescription] = [], relationships: [RelationshipDescription] = [],
        uniquenessConstraints: [[String]] = [], indexes: [[String]] = [], renamedFrom: String? = nil
    ) {
        self.name = name
        self.attributes = attributes
        self.relationships = relationships
        self.uniquenessConstraints = uniquenessConstraints
        self.indexes = indexes
        self.renamedFrom = renamedFrom
    }

    enum CodingKeys: String, CodingKey {
        case name, attributes, relationships, uniquenessConstraints, indexes, renamedFrom
    }

    /// Decodes an entity; the lists default to empty.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        attributes = try container.decodeIfPresent([AttributeDescription].self, forKey: .attributes) ?? []
        relationships = try container.decodeIfPresent([RelationshipDescription].self, forKey: .relationships) ?? []
        uniquenessConstraints = try container.decodeIfPresent([[String]].self, forKey: .uniquenessConstraints) ?? []
        indexes = try container.decodeIfPresent([[String]].self, forKey: .indexes) ?? []
        renamedFrom = try container.decodeIfPresent(String.self, forKey: .renamedFrom)
    }

    /// The attribute named `name`.
    public func attribute(named name: String) -> AttributeDescription? {
        attributes.first { $0.name.bytesEqual(name) }
    }

    /// The relationship named `name`.
    public func relationship(named name: String) -> RelationshipDescription? {
        relationships.first { $0.name.bytesEqual(name) }
    }
}

/// The objects' ids on the wire: `"Entity/rowid"`.
public struct ObjectID: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// The entity name.
    public var entity: String
    /// The row number within the entity, never reused.
    public var row: Int64

    /// Creates an id.
    public init(entity: String, row: Int64) {
        self.entity = entity
        self.row = row
    }

    /// Parses `"Entity/42"`; `nil` when the text has another shape.
    public init?(_ text: String) {
        guard let slash = text.lastIndex(of: "/"), slash != text.startIndex,
            let row = Int64(text[text.index(after: slash)...]), row > 0
        else { return nil }
        self.entity = String(text[..<slash])
        self.row = row
    }

    public var description: String { "\(entity)/\(row)" }

    /// Orders by entity, then row.
    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool {
        (lhs.entity, lhs.row) < (rhs.entity, rhs.row)
    }
}
