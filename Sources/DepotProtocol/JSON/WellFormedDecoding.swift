/// A type that reads itself straight from a well-formed ``JSONValue``,
/// skipping `Codable`'s machinery on a hot path (a `store/save` per request).
///
/// `init(wellFormed:)` returns `nil` at the first thing it does not expect;
/// ``JSONCoding/decode(_:from:field:)`` then decodes with `Codable`, which
/// names what is wrong. For input it accepts, it must equal the `Codable`
/// decoding (`WellFormedDecodingTests` checks it).
public protocol WellFormedDecodable {
    /// Reads `json`, or `nil` when it is not exactly the expected shape.
    init?(wellFormed json: JSONValue)
}

extension JSONValue {
    /// The members of an object, or `nil`.
    fileprivate var members: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// An optional member's value: `.some(nil)` when absent or null, `nil` when of another type.
    fileprivate func optional<T>(_ key: String, _ read: (JSONValue) -> T?) -> T?? {
        guard let value = members?[key], value != .null else { return .some(nil) }
        return read(value).map { .some($0) }
    }
}

private func string(_ value: JSONValue) -> String? {
    if case .string(let text) = value { return text }
    return nil
}

private func integer(_ value: JSONValue) -> Int64? {
    if case .int(let number) = value { return number }
    return nil
}

private func object(_ value: JSONValue) -> [String: JSONValue]? { value.members }

private func list<T>(_ value: JSONValue, _ read: (JSONValue) -> T?) -> [T]? {
    guard case .array(let elements) = value else { return nil }
    var result: [T] = []
    result.reserveCapacity(elements.count)
    for element in elements {
        guard let item = read(element) else { return nil }
        result.append(item)
    }
    return result
}

extension InsertedObject: WellFormedDecodable {
    public init?(wellFormed json: JSONValue) {
        guard let members = json.members, let entity = members["entity"].flatMap(string),
            let tempId = json.optional("tempId", string), let values = json.optional("values", object)
        else { return nil }
        self.init(entity: entity, tempId: tempId, values: values ?? [:])
    }
}

extension UpdatedObject: WellFormedDecodable {
    public init?(wellFormed json: JSONValue) {
        guard let members = json.members, let id = members["id"].flatMap(string),
            let version = json.optional("version", integer), let original = json.optional("original", object),
            let values = members["values"].flatMap(object)
        else { return nil }
        self.init(id: id, version: version, original: original, values: values)
    }
}

extension DeletedObject: WellFormedDecodable {
    public init?(wellFormed json: JSONValue) {
        guard let members = json.members, let id = members["id"].flatMap(string),
            let version = json.optional("version", integer)
        else { return nil }
        self.init(id: id, version: version)
    }
}

extension StoreSave.Parameters: WellFormedDecodable {
    public init?(wellFormed json: JSONValue) {
        guard json.members != nil,
            let inserted = json.optional("inserted", { list($0, InsertedObject.init(wellFormed:)) }),
            let updated = json.optional("updated", { list($0, UpdatedObject.init(wellFormed:)) }),
            let deleted = json.optional("deleted", { list($0, DeletedObject.init(wellFormed:)) }),
            let policy = json.optional("mergePolicy", { string($0).flatMap(MergePolicy.init(rawValue:)) }),
            let author = json.optional("author", string), let saveId = json.optional("saveId", string)
        else { return nil }
        self.init(
            inserted: inserted ?? [], updated: updated ?? [], deleted: deleted ?? [], mergePolicy: policy,
            author: author, saveId: saveId)
    }
}
