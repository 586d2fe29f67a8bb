import DepotProtocol
import GRDB
import GRDBSQLite

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
    /// How each key's column becomes JSON, worked out once: the bulk writer
    /// does no lookups per row.
    private let columnWriters: [ColumnWriter]
    /// The column writers' keys and prefixes, one after the other.
    private let columnBytes: [UInt8]

    /// The shape for `properties`, or all attributes and to-one relationships when `nil`.
    ///
    /// - Parameter alsoToMany: to-many keys read besides the default keys (a
    ///   request's prefetched to-many relationships): the objects keep `version`.
    public init(
        entity: EntitySchema, properties: [String]?, alsoToMany: [String] = [], field: String = "properties"
    ) throws(RPCError) {
        self.entity = entity
        includesVersion = properties == nil
        idPrefix = Array("\"\(entity.name)/".utf8)
        var member = JSONWriter()
        member.writeRaw(#"","entity":"#)
        member.write(entity.name)
        entityMember = member.bytes
        guard let properties else {
            keys = entity.columnKeys
            toManyKeys = alsoToMany.filter { entity.toMany[$0] != nil }
            (columnWriters, columnBytes) = Self.columnWriters(entity: entity, keys: keys, toManyKeys: toManyKeys)
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
        (columnWriters, columnBytes) = Self.columnWriters(entity: entity, keys: keys, toManyKeys: toManyKeys)
    }

    /// This shape's wire object taken from `whole`, an object read with every attribute and to-one key
    /// (``init(entity:properties:field:)`` with `nil`); `nil` when the shape has to-many keys, which
    /// such an object lacks.
    public func project(_ whole: [String: JSONValue]) -> JSONValue? {
        guard toManyKeys.isEmpty else { return nil }
        // Whole, unless the shape's entity lacks some of its keys (relationships to an entity the
        // key cannot read: ``Schema/visible(to:)``).
        if includesVersion && whole.count <= keys.count + 3 { return .object(whole) }
        var object: [String: JSONValue] = [:]
        for key in (includesVersion ? ["id", "entity", "version"] : ["id", "entity"]) + keys {
            object[key] = whole[key] ?? .null
        }
        return .object(object)
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

    /// Writes the wire object of the row `statement` stands on (read with
    /// ``selectList(schema:)``) straight from SQLite's columns to JSON bytes:
    /// the path of big fetches, which must not build a value per column, let
    /// alone per object. Keys come in a fixed order: id, entity, version, then
    /// the entity's declaration order.
    public func write(columnsOf statement: SQLiteStatement, dictionary: Bool = false, into writer: inout JSONWriter) {
        var separator: UInt8 = UInt8(ascii: "{")
        if !dictionary {
            writer.writeRaw(#"{"id":"#)
            writer.writeRaw(idPrefix)
            writer.write(sqlite3_column_int64(statement, 0))
            writer.writeRaw(entityMember)
            if includesVersion {
                writer.writeRaw(#","version":"#)
                writer.write(sqlite3_column_int64(statement, 1))
            }
            separator = UInt8(ascii: ",")
        }
        // Through unsafe buffers: the column writers and their bytes are read without a retain and
        // a release per column and row (they were a third of the writing in a profile).
        columnWriters.withUnsafeBufferPointer { columns in
            columnBytes.withUnsafeBufferPointer { names in
                for offset in columns.indices {
                    let column = columns[offset]
                    let index = CInt(offset + 2)
                    writer.writeRaw(CollectionOfOne(separator))
                    separator = UInt8(ascii: ",")
                    writer.writeRaw(UnsafeBufferPointer(rebasing: names[column.key]))
                    let type = sqlite3_column_type(statement, index)
                    if type == SQLITE_NULL {
                        writer.writeRaw(column.kind.isToMany ? "[]" : "null")
                        continue
                    }
                    switch column.kind {
                    case .attribute(.string) where type == SQLITE_TEXT:
                        writer.writeQuoted(utf8: Self.text(statement, index))
                    case .attribute(.integer) where type == SQLITE_INTEGER:
                        writer.write(sqlite3_column_int64(statement, index))
                    case .attribute(.double) where type == SQLITE_FLOAT:
                        writer.write(sqlite3_column_double(statement, index))
                    case .attribute(.boolean) where type == SQLITE_INTEGER:
                        sqlite3_column_int64(statement, index) != 0 ? writer.writeRaw("true") : writer.writeRaw("false")
                    case .attribute(.date) where type == SQLITE_FLOAT:
                        writer.appendDate(sqlite3_column_double(statement, index))
                    case .attribute(let attributeType):
                        let value = DatabaseValue(sqliteStatement: statement, index: index)
                        writer.write(ValueCoding.json(value, type: attributeType))
                    case .toOne:
                        guard type == SQLITE_INTEGER else {
                            writer.writeRaw("null")
                            continue
                        }
                        writer.writeRaw(CollectionOfOne(UInt8(ascii: "\"")))
                        writer.writeRaw(UnsafeBufferPointer(rebasing: names[column.prefix]))
                        writer.write(sqlite3_column_int64(statement, index))
                        writer.writeRaw(CollectionOfOne(UInt8(ascii: "\"")))
                    case .toManyIn:
                        // group_concat of row ids: digits and commas, each becomes "Destination/row".
                        let destination = UnsafeBufferPointer(rebasing: names[column.prefix])
                        writer.writeRaw(CollectionOfOne(UInt8(ascii: "[")))
                        var first = true
                        for row in Self.text(statement, index).split(separator: UInt8(ascii: ",")) {
                            writer.writeRaw(first ? #"""# : #",""#)
                            first = false
                            writer.writeRaw(destination)
                            writer.writeRaw(row)
                            writer.writeRaw(CollectionOfOne(UInt8(ascii: "\"")))
                        }
                        writer.writeRaw(CollectionOfOne(UInt8(ascii: "]")))
                    case .toMany:
                        writer.writeRaw("[]")
                    }
                }
            }
        }
        if separator == UInt8(ascii: "{") { writer.writeRaw(CollectionOfOne(separator)) }
        writer.writeRaw(CollectionOfOne(UInt8(ascii: "}")))
    }

    /// The text of column `index` as SQLite holds it (valid until the statement steps).
    private static func text(_ statement: SQLiteStatement, _ index: CInt) -> UnsafeBufferPointer<UInt8> {
        guard let start = sqlite3_column_text(statement, index) else {
            return UnsafeBufferPointer(start: nil, count: 0)
        }
        return UnsafeBufferPointer(start: start, count: Int(sqlite3_column_bytes(statement, index)))
    }

    /// `"Entity/` as bytes: the start of every id this shape writes.
    private let idPrefix: [UInt8]
    /// `","entity":"Entity"`: what follows every id's row number.
    private let entityMember: [UInt8]

    /// One selected column: where its JSON key (`"name":`) is in ``columnBytes``, how its
    /// value is written, and for a relationship where its destination's `Entity/` prefix is.
    /// Plain values only, so that reading one per row costs no reference counting.
    private struct ColumnWriter: Sendable {
        enum Kind: Sendable, Equatable {
            case attribute(AttributeType)
            /// A to-one id, after the destination's prefix.
            case toOne
            /// A to-many list, each id after the destination's prefix.
            case toManyIn
            /// A to-many key whose destination the model no longer names.
            case toMany

            var isToMany: Bool {
                switch self {
                case .toMany, .toManyIn: true
                default: false
                }
            }
        }
        let key: Range<Int>
        let kind: Kind
        var prefix: Range<Int> = 0..<0
    }

    private static func columnWriters(entity: EntitySchema, keys: [String], toManyKeys: [String]) -> (
        [ColumnWriter], [UInt8]
    ) {
        var bytes: [UInt8] = []
        func append(_ text: [UInt8]) -> Range<Int> {
            bytes += text
            return (bytes.count - text.count)..<bytes.count
        }
        func key(_ name: String) -> Range<Int> {
            var writer = JSONWriter()
            writer.write(name)
            return append(writer.bytes + [UInt8(ascii: ":")])
        }
        var columns = keys.compactMap { name -> ColumnWriter? in
            if let attribute = entity.attributes[name] {
                return ColumnWriter(key: key(name), kind: .attribute(attribute.type))
            }
            guard let relationship = entity.toOne[name] else { return nil }
            return ColumnWriter(
                key: key(name), kind: .toOne, prefix: append(Array("\(relationship.destination)/".utf8)))
        }
        columns += toManyKeys.map { name in
            guard let destination = entity.toMany[name]?.destination else {
                return ColumnWriter(key: key(name), kind: .toMany)
            }
            return ColumnWriter(key: key(name), kind: .toManyIn, prefix: append(Array("\(destination)/".utf8)))
        }
        return (columns, bytes)
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
