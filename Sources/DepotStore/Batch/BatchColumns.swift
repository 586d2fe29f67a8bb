import DepotProtocol
import GRDB

/// How each column of an entity takes a batch object's value, resolved once
/// per batch from the model: what the typed path (``BatchRows/convertTyped(_:)``,
/// ``BatchRows/readTyped(_:)``) converts by, so that it looks no key up in
/// the model per object.
struct BatchColumns: Sendable {
    /// What a column holds.
    enum Kind: Sendable {
        /// An attribute of this type.
        case attribute(AttributeType)
        /// A to-one relationship's row id, of this destination entity.
        case toOne(destination: String)
    }

    /// The entity's column keys (``EntitySchema/columnKeys``), in column order.
    let keys: [String]
    /// Each column's kind, in column order.
    let kinds: [Kind]
    /// Each column's position, by key.
    let positions: [String: Int]
    /// The columns an object must give a non-null value for: required attributes without a default.
    let required: [Int]
    /// Per column, whether it is in ``required``.
    let isRequired: [Bool]
    /// The to-one columns' positions and destination entities.
    let toOnes: [(position: Int, destination: String)]

    init(entity: EntitySchema, hasDefault: [Bool]) {
        keys = entity.columnKeys
        kinds = entity.columnKeys.map { key in
            if let attribute = entity.attributes[key] { return .attribute(attribute.type) }
            return .toOne(destination: entity.toOne[key]?.destination ?? "")
        }
        positions = Dictionary(keys.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        let required = entity.description.attributes.compactMap { attribute -> Int? in
            guard !attribute.optional, let position = entity.columnKeys.firstIndex(of: attribute.name),
                !hasDefault[position]
            else { return nil }
            return position
        }
        self.required = required
        isRequired = keys.indices.map { required.contains($0) }
        toOnes = kinds.enumerated().compactMap { position, kind in
            if case .toOne(let destination) = kind { return (position, destination) }
            return nil
        }
    }

    /// The stored value of `value` in column `position`, or `nil` when it is
    /// not one the column takes (the generic path then reports why).
    func convert(_ value: JSONValue, at position: Int) -> DatabaseValue? {
        if isRequired[position], case .null = value { return nil }
        switch kinds[position] {
        case .attribute(let type):
            return try? ValueCoding.databaseValue(value, type: type)
        case .toOne(let destination):
            if case .null = value { return .null }
            guard case .string(let text) = value, let id = ObjectID(text), id.entity == destination else { return nil }
            return id.row.databaseValue
        }
    }
}
