import DepotProtocol
import GRDB

/// A batch's objects checked and converted to column values, with every
/// problem found and the rows they reference: the part of a batch insert that
/// needs no store, so a batch can do it before it holds the writer (and a
/// streamed one object by object inside it).
///
/// Two paths convert an object. The typed path (``convertTyped(_:)``,
/// ``readTyped(_:)``) takes the common case, an object with no problem whose
/// keys are those of the object before (a homogeneous batch): it converts by
/// column kind without looking keys up in the model, and a streamed object
/// straight from the request's bytes without a ``JSONValue`` tree. Anything
/// else (a problem, a key it does not expect, a duplicate key) it leaves to
/// the generic path (``convert(_:at:)``), which reports it: both store the
/// same values and report the same problems.
struct BatchRows: Sendable {
    /// One object's converted values by column key; `nil` where the object gave none.
    typealias Row = [DatabaseValue?]

    let entity: EntitySchema
    /// The converted objects, in order (left empty once a problem was found: nothing will be written).
    private(set) var rows: [Row] = []
    /// How many objects were checked.
    private(set) var count = 0
    /// Referenced rows by destination entity, checked once against the store at the end.
    private(set) var references: [String: Set<Int64>] = [:]
    /// The first hundred problems, as the -32010 error lists them.
    private(set) var problems: [JSONValue] = []
    private(set) var problemCount = 0
    /// How many objects the typed path converted (the rest went the generic way).
    private(set) var typedCount = 0
    /// Whether the typed path is tried (off: every object goes the generic way).
    let typed: Bool

    /// Each key's column; the keys withheld from the requesting key are left out (unknown to it).
    private let positions: [String: Int]
    /// How many columns a row has (every column key of the entity).
    private let width: Int
    /// The entity's keys as the requesting key knows them, for the unknown-key message.
    private let keyList: String
    /// Per column, whether the attribute has a default (a missing required value is then no problem).
    private let hasDefault: [Bool]
    private let columns: BatchColumns
    /// The keys of the last object the typed path took, in its order, with their columns.
    private var shape: [(key: String, position: Int)] = []

    /// - Parameter withheld: relationships to entities the requesting key cannot read
    ///   (``WriteScope/withheldKeys(of:)``): unknown keys for it, as in any other save.
    init(entity: EntitySchema, typed: Bool = true, withheld: Set<String> = []) {
        self.entity = entity
        self.typed = typed
        positions = Dictionary(
            uniqueKeysWithValues: entity.columnKeys.enumerated().filter { !withheld.contains($1) }.map { ($1, $0) })
        width = entity.columnKeys.count
        keyList =
            withheld.isEmpty
            ? entity.keyList
            : (entity.description.attributes.map(\.name)
                + entity.description.relationships.map(\.name).filter { !withheld.contains($0) }).joined(
                    separator: ", ")
        let hasDefault = entity.columnKeys.map { key in
            guard let value = entity.attributes[key]?.defaultValue, !value.isNull,
                let type = entity.attributes[key]?.type
            else { return false }
            return (try? ValueCoding.databaseValue(value, type: type)) != nil
        }
        self.hasDefault = hasDefault
        columns = BatchColumns(entity: entity, hasDefault: hasDefault)
    }

    /// Checks and converts every object of a batch.
    init(entity: EntitySchema, objects: [[String: JSONValue]], typed: Bool = true) {
        self.init(entity: entity, typed: typed)
        rows.reserveCapacity(objects.count)
        for (index, object) in objects.enumerated() {
            let row = convertTyped(object) ?? convert(object, at: index)
            if problemCount == 0 { rows.append(row) }
        }
        if problemCount > 0 { rows = [] }
        count = objects.count
    }

    mutating func problem(_ index: Int, _ key: String?, _ code: String, _ message: String) {
        problemCount += 1
        guard problems.count < 100 else { return }
        problems.append([
            "object": index < 0 ? .null : .string("objects[\(index)]"), "key": key.map { .string($0) } ?? .null,
            "code": .string(code), "message": .string(message),
        ])
    }

    /// Checks and converts one object, noting its problems (the generic path).
    ///
    /// An object's problems are listed by key name, then its missing required
    /// attributes in model order: the same list however its dictionary iterates.
    mutating func convert(_ object: [String: JSONValue], at index: Int) -> Row {
        var row = Row(repeating: nil, count: width)
        var found: [(key: String, code: String, message: String)] = []
        for (key, value) in object {
            guard let position = positions[key] else {
                let why =
                    entity.toMany[key] != nil
                    ? "to-many relationships cannot be set by batchInsert"
                    : "\(entity.name) has no key '\(key)' (keys: \(keyList))"
                found.append((key, "unknownKey", why))
                continue
            }
            if let attribute = entity.attributes[key] {
                do {
                    row[position] = try ValueCoding.databaseValue(value, type: attribute.type)
                } catch {
                    found.append(
                        (key, "type", "\(entity.name).\(key) must be \(error.expected), got \(value.excerpt())"))
                }
            } else if let relationship = entity.toOne[key] {
                if value.isNull {
                    row[position] = .null
                } else if let text = value.stringValue, let id = ObjectID(text), id.entity == relationship.destination {
                    row[position] = id.row.databaseValue
                    references[relationship.destination, default: []].insert(id.row)
                } else {
                    found.append(
                        (
                            key, "badReference",
                            "\(key) must be the id of a \(relationship.destination), got \(value.excerpt())"
                        ))
                }
            }
        }
        for (key, code, message) in found.sorted(by: { $0.key < $1.key }) { problem(index, key, code, message) }
        for attribute in entity.description.attributes where !attribute.optional {
            guard let position = positions[attribute.name], (object[attribute.name] ?? .null).isNull,
                !hasDefault[position]
            else { continue }
            problem(index, attribute.name, "required", "\(entity.name).\(attribute.name) is required")
        }
        return row
    }

    /// The typed path for a parsed object: its row when it has the keys of
    /// the object before and no problem; `nil` (nothing noted) otherwise,
    /// for ``convert(_:at:)`` to take.
    mutating func convertTyped(_ object: [String: JSONValue]) -> Row? {
        guard typed else { return nil }
        var row = Row(repeating: nil, count: width)
        switch object.count == shape.count ? fill(&row, from: object) : .otherKeys {
        case .filled: break
        case .problem: return nil
        case .otherKeys:
            // Another key set: learn it, unless a key is unknown.
            var keys: [(key: String, position: Int)] = []
            keys.reserveCapacity(object.count)
            for key in object.keys {
                guard let position = positions[key] else { return nil }
                keys.append((key, position))
            }
            shape = keys
            row = Row(repeating: nil, count: width)
            guard case .filled = fill(&row, from: object) else { return nil }
        }
        return accept(row)
    }

    private enum Fill { case filled, otherKeys, problem }

    /// Fills `row` with `object`'s values by ``shape``.
    private func fill(_ row: inout Row, from object: [String: JSONValue]) -> Fill {
        for (key, position) in shape {
            guard let value = object[key] else { return .otherKeys }
            guard let converted = columns.convert(value, at: position) else { return .problem }
            row[position] = converted
        }
        return .filled
    }

    /// The typed path for a streamed object, read member by member from
    /// `reader` (positioned at it) without a ``JSONValue`` tree: its row
    /// when it is an object with no problem and no repeated key; `nil`
    /// (nothing noted, the reader anywhere in it) otherwise, for the caller to
    /// read it again and give it to ``convert(_:at:)``.
    mutating func readTyped(_ reader: inout JSONStreamReader) throws(JSONParser.Failure) -> Row? {
        guard typed else { return nil }
        try reader.beginObject()
        var row = Row(repeating: nil, count: width)
        var given = 0
        while let key = try reader.nextKey() {
            let position: Int
            if given < shape.count, shape[given].key == key {
                position = shape[given].position
            } else {
                guard let known = positions[key] else { return nil }
                position = known
                if given < shape.count { shape[given] = (key, known) } else { shape.append((key, known)) }
            }
            // A repeated key: the generic path keeps the last value, as the parser does.
            guard row[position] == nil, let converted = columns.convert(try reader.value(), at: position) else {
                return nil
            }
            row[position] = converted
            given += 1
        }
        if shape.count > given { shape.removeLast(shape.count - given) }
        return accept(row)
    }

    /// A typed row once every required column has a value; notes the rows its to-ones reference.
    private mutating func accept(_ row: Row) -> Row? {
        for position in columns.required where row[position] == nil { return nil }
        for (position, destination) in columns.toOnes {
            guard case .int64(let target)? = row[position]?.storage else { continue }
            references[destination, default: []].insert(target)
        }
        typedCount += 1
        return row
    }
}
