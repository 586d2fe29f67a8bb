import DepotProtocol
import Foundation

/// One stored object as the client sees it: a dynamic record of the model's
/// values, like an `NSManagedObject` read through `value(forKey:)`.
///
/// ```swift
/// let team: DepotObject = controller.object(at: IndexPath(item: 0, section: 0))
/// print(team.string("teamName") ?? "?", team.int("wins") ?? 0)
/// ```
///
/// It is a value: changing one changes nothing in the store. Change objects
/// through an ``ObjectContext`` and save it.
public struct DepotObject: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// The object's id, `Entity/rowid` (or a context's temporary id before the first save).
    public var id: String
    /// The entity's name.
    public var entity: String
    /// The version the values belong to; `nil` when the fetch named `properties`.
    public var version: Int64?
    /// Attribute values and to-one relationships (as ids), by key.
    public var values: [String: JSONValue]
    /// Whether the values are not loaded (an object that was deleted before it was ever read).
    public var isFault: Bool

    /// Creates an object.
    public init(
        id: String, entity: String, version: Int64? = nil, values: [String: JSONValue] = [:], isFault: Bool = false
    ) {
        self.id = id
        self.entity = entity
        self.version = version
        self.values = values
        self.isFault = isFault
    }

    /// Reads an object from its wire form `{"id", "entity", "version", <values>}`.
    public init(json: JSONValue) throws(DepotClientError) {
        guard var members = json.objectValue, let id = members.removeValue(forKey: "id")?.stringValue else {
            throw .invalidResponse("an object must be a JSON object with a string 'id': \(json.excerpt())")
        }
        let entity = members.removeValue(forKey: "entity")?.stringValue ?? Self.entity(ofID: id)
        let version = members.removeValue(forKey: "version")?.intValue
        self.init(id: id, entity: entity, version: version, values: members)
    }

    /// A fault: an object known only by its id.
    public static func fault(id: String) -> DepotObject {
        DepotObject(id: id, entity: entity(ofID: id), isFault: true)
    }

    /// The entity part of an id such as `Team/42`.
    public static func entity(ofID id: String) -> String {
        id.firstIndex(of: "/").map { String(id[..<$0]) } ?? id
    }

    /// The wire form.
    public var json: JSONValue {
        var members = values
        members["id"] = .string(id)
        members["entity"] = .string(entity)
        if let version { members["version"] = .int(version) }
        return .object(members)
    }

    /// The value for `key`, or `nil` when the object has none (not `.null`, which is a stored nil).
    public subscript(key: String) -> JSONValue? {
        get { values[key] }
        set { values[key] = newValue }
    }

    /// The value for `key` as a string.
    public func string(_ key: String) -> String? { values[key]?.stringValue }
    /// The value for `key` as an integer.
    public func int(_ key: String) -> Int? { values[key]?.intValue.map { Int($0) } }
    /// The value for `key` as a 64-bit integer.
    public func int64(_ key: String) -> Int64? { values[key]?.intValue }
    /// The value for `key` as a double.
    public func double(_ key: String) -> Double? { values[key]?.doubleValue }
    /// The value for `key` as a boolean.
    public func bool(_ key: String) -> Bool? { values[key]?.boolValue }
    /// The value for `key` as a date (ISO 8601 on the wire).
    public func date(_ key: String) -> Date? { values[key]?.stringValue.flatMap(DepotDate.parse) }
    /// The value for `key` as a UUID.
    public func uuid(_ key: String) -> UUID? { values[key]?.stringValue.flatMap(UUID.init(uuidString:)) }
    /// The value for `key` as bytes (base64 on the wire).
    public func data(_ key: String) -> Data? { values[key]?.stringValue.flatMap { Data(base64Encoded: $0) } }
    /// The id of the object a to-one relationship `key` points to.
    public func objectID(_ key: String) -> String? { values[key]?.stringValue }

    /// Decodes the object as `T`: the values plus `id`, `entity` and `version`;
    /// dates are read from ISO 8601.
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = DepotDate.parse(text) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 date: \(text)"))
            }
            return date
        }
        return try decoder.decode(T.self, from: Data(JSONWriter.encode(json)))
    }

    public var description: String {
        "\(id) v\(version.map(String.init) ?? "?") \(JSONValue.object(values).excerpt(limit: 120))"
    }
}

/// Dates on the wire: ISO 8601 UTC with milliseconds, `2026-11-22T10:15:30.250Z`.
public enum DepotDate {
    /// Reads a wire date (with or without fractional seconds).
    public static func parse(_ text: String) -> Date? {
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }

    /// The wire form of `date`.
    public static func string(from date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
