import DepotProtocol

/// Checks a model definition before anything is written: names, types,
/// defaults, relationship inverses, constraints and indexes.
enum ModelValidator {
    /// Keys that objects on the wire use for themselves.
    static let reservedKeys: Set<String> = ["id", "entity", "version"]

    static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.isASCII, first == "_" || first.properties.isAlphabetic,
            name.count <= 64
        else { return false }
        return name.unicodeScalars.allSatisfy {
            $0.isASCII && ($0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0))
        }
    }

    /// Validates the whole model `entities`; throws -32602 naming the first problem.
    ///
    /// - Parameter fields: the field prefix of each entity in errors (default `entities[i]`).
    static func validate(_ entities: [EntityDescription], fields: [String]? = nil) throws(RPCError) {
        var names = Set<String>()
        let byName = Dictionary(entities.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for (index, entity) in entities.enumerated() {
            let field = fields?[index] ?? "entities[\(index)]"
            guard isIdentifier(entity.name) else {
                throw .invalidParams(
                    "entity name '\(entity.name)' must be an identifier (letters, digits, _)", field: "\(field).name")
            }
            guard names.insert(entity.name).inserted else {
                throw .invalidParams("entity '\(entity.name)' is defined twice", field: "\(field).name")
            }
            var keys = Set<String>()
            for (position, attribute) in entity.attributes.enumerated() {
                let attributeField = "\(field).attributes[\(position)]"
                try checkKey(attribute.name, entity: entity.name, field: "\(attributeField).name", keys: &keys)
                if attribute.folded, attribute.type != .string {
                    throw .invalidParams(
                        "folded keeps a folded copy of text: \(entity.name).\(attribute.name) is \(attribute.type.rawValue), not string",
                        field: "\(attributeField).folded")
                }
                if let value = attribute.defaultValue, !value.isNull {
                    do {
                        _ = try ValueCoding.databaseValue(value, type: attribute.type)
                    } catch {
                        throw .invalidParams(
                            "default of \(entity.name).\(attribute.name) must be \(error.expected), got \(value.excerpt())",
                            field: "\(attributeField).default")
                    }
                }
            }
            for (position, relationship) in entity.relationships.enumerated() {
                let relationshipField = "\(field).relationships[\(position)]"
                try checkKey(relationship.name, entity: entity.name, field: "\(relationshipField).name", keys: &keys)
                guard let destination = byName[relationship.destination] else {
                    throw .invalidParams(
                        "relationship \(entity.name).\(relationship.name) names unknown destination '\(relationship.destination)'",
                        field: "\(relationshipField).destination")
                }
                try checkInverse(relationship, of: entity, destination: destination, field: relationshipField)
            }
            for (position, constraint) in entity.uniquenessConstraints.enumerated() {
                try checkColumns(constraint, of: entity, field: "\(field).uniquenessConstraints[\(position)]")
            }
            for (position, index) in entity.indexes.enumerated() {
                try checkColumns(index, of: entity, field: "\(field).indexes[\(position)]")
            }
        }
    }

    private static func checkKey(_ key: String, entity: String, field: String, keys: inout Set<String>) throws(RPCError)
    {
        guard isIdentifier(key), !key.hasPrefix("_") else {
            throw .invalidParams("key '\(key)' of \(entity) must be an identifier not starting with _", field: field)
        }
        guard !reservedKeys.contains(key) else {
            throw .invalidParams(
                "key '\(key)' of \(entity) is reserved (id, entity and version are every object's own)", field: field)
        }
        guard keys.insert(key).inserted else {
            throw .invalidParams("key '\(key)' of \(entity) is defined twice", field: field)
        }
    }

    private static func checkInverse(
        _ relationship: RelationshipDescription, of entity: EntityDescription, destination: EntityDescription,
        field: String
    ) throws(RPCError) {
        let name = "\(entity.name).\(relationship.name)"
        guard let inverseName = relationship.inverse else {
            if relationship.toMany {
                throw .invalidParams(
                    "to-many relationship \(name) needs an inverse relationship on \(destination.name) (to-one, or to-many for many-to-many)",
                    field: "\(field).inverse")
            }
            return
        }
        guard let inverse = destination.relationship(named: inverseName) else {
            throw .invalidParams(
                "inverse '\(inverseName)' of \(name) is not a relationship of \(destination.name)",
                field: "\(field).inverse")
        }
        guard inverse.destination == entity.name, inverse.inverse == nil || inverse.inverse == relationship.name else {
            throw .invalidParams(
                "\(destination.name).\(inverseName) does not point back to \(name)", field: "\(field).inverse")
        }
        if relationship.toMany && inverse.toMany && destination.name == entity.name && inverseName == relationship.name
        {
            throw .invalidParams(
                "many-to-many relationship \(name) is its own inverse, which is not supported: declare two relationships, each the other's inverse (e.g. followers and following)",
                field: "\(field).inverse")
        }
        if !relationship.toMany && !inverse.toMany {
            throw .invalidParams(
                "one-to-one inverse relationships (\(name)) are not supported yet: declare one side without an inverse",
                field: "\(field).inverse")
        }
    }

    private static func checkColumns(_ columns: [String], of entity: EntityDescription, field: String) throws(RPCError)
    {
        guard !columns.isEmpty else {
            throw .invalidParams("an index or constraint of \(entity.name) names no keys", field: field)
        }
        for key in columns
        where entity.attribute(named: key) == nil && entity.relationship(named: key).map({ !$0.toMany }) != true {
            throw .invalidParams(
                "'\(key)' in an index or constraint of \(entity.name) is not an attribute or to-one relationship",
                field: field)
        }
    }
}
