import DepotProtocol
import GRDB

/// Which keys of an entity to read, and how to turn a row into a wire object:
/// `{"id": "Team/42", "entity": "Team", "version": 3, <attributes>, <to-one ids>}`.
///
/// To-many relationships are read only when named in `properties`, as arrays
/// of ids gathered by a correlated subquery in the same statement. With
/// `properties`, an object carries `id`, `entity` and those keys only: no
/// `version`, which belongs to the whole object (and would change when keys
/// the request left out change).
public struct ObjectShape: Sendable {
    /// The entity.
    public let entity: EntitySchema
    /// Attribute and to-one keys to read, in order.
    public let keys: [String]
    /// To-many keys to read.
    public let toManyKeys: [String]

    /// Whether objects carry `version` (only when no `properties` narrowed them).
    public let includesVersion: Bool

    /// The shape for `properties`, or all attributes and to-one relationships when `nil`.
    public init(entity: EntitySchema, properties: [String]?, field: String = "properties") throws(RPCError) {
        self.entity = entity
        includesVersion = properties == nil
        guard let properties else {
            keys = entity.columnKeys
            toManyKeys = []
            return
        }
        var keys: [String] = []
        var toManyKeys: [String] = []
        for (index, key) in properties.enumerated() {
            if entity.attributes[key] != nil || entity.toOne[key] != nil {
                keys.append(key)
            } else if entity.toMany[key] != nil {
                toManyKeys.append(key)
            } else {
                throw .invalidParams(
                    "unknown key '\(key)' on \(entity.name) (keys: \(entity.keyList))", field: "\(field)[\(index)]")
            }
        }
        self.keys = keys
        self.toManyKeys = toManyKeys
    }

    /// The SELECT list over alias `t0`: id, version, the keys, then the to-many id lists.
    public func selectList(schema: Schema) -> String {
        var columns = ["t0.id", "t0._version"]
        columns += keys.map { "t0." + entity.column($0) }
        for key in toManyKeys {
            if let join = entity.joins[key] {
                columns.append(
                    "(SELECT group_concat(d.m) FROM (SELECT \(join.memberColumn) AS m FROM \(join.table) WHERE \(join.ownerColumn) = t0.id ORDER BY \(join.memberColumn)) AS d)"
                )
                continue
            }
            guard let relationship = entity.toMany[key], let inverse = relationship.inverse,
                let destination = schema.entity(named: relationship.destination)
            else { continue }
            columns.append(
                "(SELECT group_concat(d.id) FROM (SELECT id FROM \(destination.table) WHERE \(destination.column(inverse)) = t0.id ORDER BY id) AS d)"
            )
        }
        return columns.joined(separator: ", ")
    }

    /// Writes the wire object of a row read with ``selectList(schema:)`` straight
    /// to JSON bytes: the path of big fetches, which must not build a value
    /// tree per object. Keys come in a fixed order: id, entity, version, then
    /// the entity's declaration order.
    public func write(_ row: Row, dictionary: Bool = false, into writer: inout JSONWriter) {
        writer.writeRaw("{")
        var first = true
        func key(_ name: String) {
            if !first { writer.writeRaw(",") }
            first = false
            writer.write(name)
            writer.writeRaw(":")
        }
        if !dictionary {
            key("id")
            writer.write("\(entity.name)/\(row[0] as Int64)")
            key("entity")
            writer.write(entity.name)
            if includesVersion {
                key("version")
                writer.write(row[1] as Int64)
            }
        }
        var column = 2
        for name in keys {
            key(name)
            let value: DatabaseValue = row[column]
            column += 1
            if let attribute = entity.attributes[name] {
                switch (attribute.type, value.storage) {
                case (_, .null): writer.writeRaw("null")
                case (.string, .string(let text)): writer.write(text)
                case (.integer, .int64(let number)): writer.write(number)
                case (.double, .double(let number)): writer.write(number)
                case (.boolean, .int64(let number)): number != 0 ? writer.writeRaw("true") : writer.writeRaw("false")
                case (.date, .double(let seconds)): writer.appendDate(seconds)
                default: writer.write(ValueCoding.json(value, type: attribute.type))
                }
            } else if let relationship = entity.toOne[name] {
                if let target = Int64.fromDatabaseValue(value) {
                    writer.write("\(relationship.destination)/\(target)")
                } else {
                    writer.writeRaw("null")
                }
            }
        }
        for name in toManyKeys {
            key(name)
            let destination = entity.toMany[name]?.destination ?? ""
            let list: String? = row[column]
            column += 1
            writer.write(.array((list ?? "").split(separator: ",").map { JSONValue.string("\(destination)/\($0)") }))
        }
        writer.writeRaw("}")
    }

    /// The wire object for a row read with ``selectList(schema:)``.
    ///
    /// - Parameter dictionary: leave out id, entity and version (`resultType: dictionaries`).
    public func object(from row: Row, dictionary: Bool = false) -> JSONValue {
        var members: [String: JSONValue] = [:]
        members.reserveCapacity(keys.count + 3)
        if !dictionary {
            members["id"] = .string("\(entity.name)/\(row[0] as Int64)")
            members["entity"] = .string(entity.name)
            if includesVersion { members["version"] = .int(row[1]) }
        }
        var column = 2
        for key in keys {
            let value: DatabaseValue = row[column]
            if let attribute = entity.attributes[key] {
                members[key] = ValueCoding.json(value, type: attribute.type)
            } else if let relationship = entity.toOne[key] {
                members[key] =
                    Int64.fromDatabaseValue(value).map { .string("\(relationship.destination)/\($0)") } ?? .null
            }
            column += 1
        }
        for key in toManyKeys {
            let destination = entity.toMany[key]?.destination ?? ""
            let list: String? = row[column]
            let ids = (list ?? "").split(separator: ",").map { JSONValue.string("\(destination)/\($0)") }
            members[key] = .array(ids)
            column += 1
        }
        return .object(members)
    }
}
