/// A JSON value: what travels on the wire wherever the shape depends on the
/// user's model (object values, predicate arguments, JSON-RPC params).
///
/// Integers and doubles are kept apart so that an `integer` attribute never
/// round-trips through floating point. Strings, and object member names, are
/// equal and hash by their UTF-8 bytes, as the store compares text (DESIGN.md
/// §4): `.string("jos\u{E9}") != .string("jose\u{301}")`, whatever Swift's
/// `String ==` says.
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    /// Equal as the store compares values: strings and member names by UTF-8 bytes.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.int(let a), .int(let b)): a == b
        case (.double(let a), .double(let b)): a == b
        case (.string(let a), .string(let b)): a.bytesEqual(b)
        case (.array(let a), .array(let b)): a.count == b.count && zip(a, b).allSatisfy { $0 == $1 }
        case (.object(let a), .object(let b)):
            // A `[String: _]` finds a member by canonical equivalence: the names' bytes must match too.
            a.count == b.count
                && a.allSatisfy { name, value in
                    guard let index = b.index(forKey: name) else { return false }
                    return b[index].key.bytesEqual(name) && b[index].value == value
                }
        default: false
        }
    }

    /// Hashes strings and member names by their UTF-8 bytes.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .bool(let value):
            hasher.combine(1 as UInt8)
            hasher.combine(value)
        case .int(let value):
            hasher.combine(2 as UInt8)
            hasher.combine(value)
        case .double(let value):
            hasher.combine(3 as UInt8)
            hasher.combine(value)
        case .string(let value):
            hasher.combine(4 as UInt8)
            ByteString.hash(value, into: &hasher)
        case .array(let elements):
            hasher.combine(5 as UInt8)
            hasher.combine(elements.count)
            for element in elements { element.hash(into: &hasher) }
        case .object(let members):
            hasher.combine(6 as UInt8)
            // Order-independent, as the members are.
            var sum = 0
            for (name, value) in members {
                var member = Hasher()
                ByteString.hash(name, into: &member)
                value.hash(into: &member)
                sum &+= member.finalize()
            }
            hasher.combine(sum)
        }
    }

    /// The name of the value's JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int: "integer"
        case .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    /// The string, if this is one.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer, if this is one (or a double with no fractional part).
    public var intValue: Int64? {
        switch self {
        case .int(let value): value
        case .double(let value) where value.rounded() == value && abs(value) < 9.2e18: Int64(value)
        default: nil
        }
    }

    /// The number as a double, if this is a number.
    public var doubleValue: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The boolean, if this is one.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The members, if this is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The elements, if this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// Whether this is `null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The member named `key` of an object, or `nil`.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// A short rendering of the value for error messages, cut at `limit` characters.
    public func excerpt(limit: Int = 80) -> String {
        let text = String(decoding: JSONWriter.encode(self), as: UTF8.self)
        return text.count > limit ? String(text.prefix(limit)) + "…" : text
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    /// Creates `null`.
    public init(nilLiteral: ()) { self = .null }
    /// Creates a boolean.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// Creates an integer.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// Creates a double.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// Creates a string.
    public init(stringLiteral value: String) { self = .string(value) }
    /// Creates an array.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// Creates an object.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue: Codable {
    /// Decodes any JSON value.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Encodes the value as itself.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

/// Interpolated strings are JSON strings too: `"Brazil-\(n)"`.
extension JSONValue: ExpressibleByStringInterpolation {}

/// An ordinary Swift value that has a JSON form, so APIs that take values
/// (`setValue(_:forKey:)`, predicate arguments, inserted values) accept
/// `Int`, `String`, `Double`, `Bool`, optionals and arrays of them as they are.
public protocol JSONValueConvertible: Sendable {
    /// The value's JSON form.
    var jsonValue: JSONValue { get }
}

extension JSONValue: JSONValueConvertible {
    /// The value itself.
    public var jsonValue: JSONValue { self }
}

extension String: JSONValueConvertible {
    /// A JSON string.
    public var jsonValue: JSONValue { .string(self) }
}

extension Substring: JSONValueConvertible {
    /// A JSON string.
    public var jsonValue: JSONValue { .string(String(self)) }
}

extension Bool: JSONValueConvertible {
    /// A JSON boolean.
    public var jsonValue: JSONValue { .bool(self) }
}

extension Int: JSONValueConvertible {
    /// A JSON integer.
    public var jsonValue: JSONValue { .int(Int64(self)) }
}

extension Int64: JSONValueConvertible {
    /// A JSON integer.
    public var jsonValue: JSONValue { .int(self) }
}

extension Int32: JSONValueConvertible {
    /// A JSON integer.
    public var jsonValue: JSONValue { .int(Int64(self)) }
}

extension Double: JSONValueConvertible {
    /// A JSON number.
    public var jsonValue: JSONValue { .double(self) }
}

extension Float: JSONValueConvertible {
    /// A JSON number.
    public var jsonValue: JSONValue { .double(Double(self)) }
}

extension Optional: JSONValueConvertible where Wrapped: JSONValueConvertible {
    /// The wrapped value's JSON form, or `null`.
    public var jsonValue: JSONValue { self?.jsonValue ?? .null }
}

extension Array: JSONValueConvertible where Element: JSONValueConvertible {
    /// A JSON array.
    public var jsonValue: JSONValue { .array(map(\.jsonValue)) }
}

extension Dictionary: JSONValueConvertible where Key == String, Value: JSONValueConvertible {
    /// A JSON object.
    public var jsonValue: JSONValue { .object(mapValues(\.jsonValue)) }
}
