/// Decodes `Decodable` types straight from a ``JSONValue``, without going back
/// to bytes: every request's params pass through here, and fields typed
/// `JSONValue` (object values, arguments) are taken as they are.
struct JSONValueDecoder {
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try ValueDecoder(value: value, codingPath: []).decodeValue(T.self)
    }
}

private struct IndexKey: CodingKey {
    var stringValue: String { "\(intValue ?? 0)" }
    var intValue: Int?
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func mismatch(_ expected: Any.Type) -> DecodingError {
        // The description is the value itself (shortened): JSONCoding puts it in the message.
        .typeMismatch(expected, .init(codingPath: codingPath, debugDescription: briefText(of: value)))
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self { return value as! T }
        if T.self == [[String: JSONValue]].self, let objects = value.objectElements {
            // A batch's objects, taken as they are (anything but objects decodes below, naming the problem).
            return objects as! T
        }
        if let choices = T.self as? any (CaseIterable & RawRepresentable).Type {
            // Depot's own words for an enum's bad value, not the standard library's
            // "Cannot initialize X from invalid String value y".
            let allowed = allowedRawValues(of: choices)
            guard case .string(let text) = value else { throw mismatch(T.self) }
            guard allowed.contains(text) else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: codingPath,
                        debugDescription: "\"\(text)\" is not allowed; use one of \(allowed.joined(separator: ", "))"))
            }
        }
        return try T(from: self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch([String: JSONValue].self) }
        return KeyedDecodingContainer(KeyedContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw mismatch([JSONValue].self) }
        return UnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }
}

extension ValueDecoder: IntegerDecodingContainer {
    func decodeNil() -> Bool { value.isNull }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(Bool.self) }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self) }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard let number = value.doubleValue else { throw mismatch(Double.self) }
        return number
    }

    func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }

    func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        guard let number = value.intValue, let exact = I(exactly: number) else { throw mismatch(I.self) }
        return exact
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func child(_ key: Key) throws -> ValueDecoder {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "no value for \(key.stringValue)"))
        }
        return ValueDecoder(value: value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { (members[key.stringValue] ?? .null).isNull }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        let decoder = try child(key)
        if decoder.value.isNull, T.self != JSONValue.self {
            throw DecodingError.valueNotFound(T.self, .init(codingPath: decoder.codingPath, debugDescription: "null"))
        }
        return try decoder.decodeValue(T.self)
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let value = members[key.stringValue], !value.isNull else { return nil }
        return try ValueDecoder(value: value, codingPath: codingPath + [key]).decodeValue(T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try child(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try child(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { ValueDecoder(value: .object(members), codingPath: codingPath) }

    func superDecoder(forKey key: Key) throws -> any Decoder { try child(key) }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next() throws -> ValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                JSONValue.self,
                .init(codingPath: codingPath + [IndexKey(currentIndex)], debugDescription: "the array ended"))
        }
        defer { currentIndex += 1 }
        return ValueDecoder(value: elements[currentIndex], codingPath: codingPath + [IndexKey(currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let decoder = try next()
        if decoder.value.isNull, T.self != JSONValue.self {
            throw DecodingError.valueNotFound(T.self, .init(codingPath: decoder.codingPath, debugDescription: "null"))
        }
        return try decoder.decodeValue(T.self)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<
        NestedKey
    > {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }

    mutating func superDecoder() throws -> any Decoder { try next() }
}

/// The raw values of a string enum's cases, in declaration order.
func allowedRawValues<E: CaseIterable & RawRepresentable>(of type: E.Type) -> [String] {
    type.allCases.map { "\($0.rawValue)" }
}

/// `value` as JSON text, shortened to about 60 characters, for error messages.
func briefText(of value: JSONValue) -> String {
    let text = String(decoding: JSONWriter.encode(value), as: UTF8.self)
    return text.count <= 60 ? text : String(text.prefix(57)) + "..."
}

extension JSONValue {
    /// The members of each element when this is an array of objects only.
    fileprivate var objectElements: [[String: JSONValue]]? {
        guard case .array(let elements) = self else { return nil }
        var objects: [[String: JSONValue]] = []
        objects.reserveCapacity(elements.count)
        for element in elements {
            guard case .object(let members) = element else { return nil }
            objects.append(members)
        }
        return objects
    }
}
