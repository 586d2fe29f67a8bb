import DepotProtocol
import Foundation

/// Decodes `Decodable` types straight from the UTF-8 bytes of a wire object
/// (``WireBytes``), as `JSONDecoder` would with Depot's strategies: dates from
/// ISO 8601 (``DepotDate/parse(_:)``), `Data` from base64, `URL` from a string,
/// `Decimal` from a number; a field typed ``JSONValue`` through its own
/// `Decodable` conformance, as before (so `3.0` there becomes `.int(3)`, as `JSONDecoder` made it).
///
/// It builds nothing but the values it is asked for: no ``JSONValue`` tree and no
/// second encoding of each object, which is what made typed streamed fetches slow.
struct WireDecoder: Decoder {
    let wire: WireBytes
    /// The value's bytes.
    let range: Range<Int>
    /// Where the value's container is (`nil`: the top), and the value's key in it. The
    /// path is kept as a chain built only on the way down into nested containers, so that
    /// decoding a field of a top-level object copies nothing reference-counted.
    let parent: WireCodingPath?
    let key: (any CodingKey)?
    var codingPath: [any CodingKey] {
        var path = parent?.keys ?? []
        if let key { path.append(key) }
        return path
    }
    /// The value's own place, for the containers opened on it.
    private var place: WireCodingPath? { key.map { WireCodingPath(parent: parent, key: $0) } ?? parent }
    /// The members of the object at `range`, when the caller has read them already.
    var scanned: [WireBytes.Member]? = nil
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// Decodes the value at `range` of `wire` as `T`; `members`, when given, are those of
    /// the object at `range` (read once by the caller, not again).
    static func decode<T: Decodable>(
        _ type: T.Type, from wire: WireBytes, range: Range<Int>, members: [WireBytes.Member]? = nil
    ) throws -> T {
        try WireDecoder(wire: wire, range: range, parent: nil, key: nil, scanned: members).decodeValue(T.self)
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == String.self { return try decode(String.self) as! T }
        if T.self == Date.self {
            // The daemon's form, read in place (no String per date); anything else as text.
            if range.count > 2, wire.bytes[range.lowerBound] == UInt8(ascii: "\""),
                let date = DepotDate.parseWireForm(
                    utf8: UnsafeBufferPointer(rebasing: wire.bytes[(range.lowerBound + 1)..<(range.upperBound - 1)]))
            {
                return date as! T
            }
            let text = try decode(String.self)
            guard let date = DepotDate.parse(text) else { throw corrupted("not an ISO 8601 date: \(text)") }
            return date as! T
        }
        if T.self == Data.self {
            guard let data = Data(base64Encoded: try decode(String.self)) else {
                throw corrupted("Encountered Data is not valid Base64.")
            }
            return data as! T
        }
        if T.self == URL.self {
            guard let url = URL(string: try decode(String.self)) else { throw corrupted("Invalid URL string.") }
            return url as! T
        }
        if T.self == Decimal.self {
            _ = try number(Decimal.self)
            guard let decimal = Decimal(string: numberText(), locale: Locale(identifier: "en_US_POSIX")) else {
                throw corrupted("Parsed JSON number <\(numberText())> does not fit in Decimal.")
            }
            return decimal as! T
        }
        return try T(from: self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard wire.bytes[range.lowerBound] == UInt8(ascii: "{") else { throw mismatch([String: Any].self) }
        if let scanned {
            return KeyedDecodingContainer(WireKeyedContainer<Key>(wire: wire, place: place, members: scanned))
        }
        var members: [WireBytes.Member] = []
        members.reserveCapacity(16)
        try wire.members(of: range, into: &members)
        return KeyedDecodingContainer(WireKeyedContainer<Key>(wire: wire, place: place, members: members))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard wire.bytes[range.lowerBound] == UInt8(ascii: "[") else { throw mismatch([Any].self) }
        return WireUnkeyedContainer(wire: wire, place: place, elements: try wire.elements(of: range))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func json() throws -> JSONValue {
        do {
            return try wire.value(at: range)
        } catch {
            throw corrupted("The given data was not valid JSON: \(error)")
        }
    }

    private func numberText() -> String { String(decoding: wire.bytes[range], as: UTF8.self) }

    func mismatch(_ expected: Any.Type) -> DecodingError {
        .typeMismatch(
            expected,
            .init(
                codingPath: codingPath,
                debugDescription: "Expected to decode \(expected) but found \(wire.kindName(range)) instead."))
    }

    func corrupted(_ description: String) -> DecodingError {
        .dataCorrupted(.init(codingPath: codingPath, debugDescription: description))
    }
}

extension WireDecoder: IntegerDecodingContainer {
    func decodeNil() -> Bool { wire.isNull(range) }

    func decode(_ type: Bool.Type) throws -> Bool {
        if range.count == 4, wire.bytes[range].elementsEqual("true".utf8) { return true }
        if range.count == 5, wire.bytes[range].elementsEqual("false".utf8) { return false }
        throw nullOrMismatch(Bool.self)
    }

    func decode(_ type: String.Type) throws -> String {
        guard wire.bytes[range.lowerBound] == UInt8(ascii: "\"") else { throw nullOrMismatch(String.self) }
        do {
            return try wire.string(at: range)
        } catch {
            throw corrupted("The given data was not valid JSON: \(error)")
        }
    }

    func decode(_ type: Double.Type) throws -> Double {
        switch try number(Double.self) {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: throw mismatch(Double.self)
        }
    }

    func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }

    func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> I {
        let value = try number(I.self)
        let exact: I?
        switch value {
        case .int(let number): exact = I(exactly: number)
        case .double(let number): exact = I(exactly: number)
        default: exact = nil
        }
        guard let exact else { throw corrupted("Parsed JSON number <\(numberText())> does not fit in \(I.self).") }
        return exact
    }

    /// The number at the range, built as the parser builds it.
    private func number(_ expected: Any.Type) throws -> JSONValue {
        let first = wire.bytes[range.lowerBound]
        guard first == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
            throw nullOrMismatch(expected)
        }
        // Short integers, the common case, are summed in place (a leading zero is left to the parser to refuse).
        let negative = first == UInt8(ascii: "-")
        let digits = (negative ? range.lowerBound + 1 : range.lowerBound)..<range.upperBound
        if !digits.isEmpty, digits.count <= 18, wire.bytes[digits.lowerBound] != UInt8(ascii: "0") || digits.count == 1
        {
            var value: Int64 = 0
            for index in digits {
                let digit = wire.bytes[index] &- 0x30
                guard digit < 10 else { return try json() }
                value = value * 10 + Int64(digit)
            }
            return .int(negative ? -value : value)
        }
        return try json()
    }

    private func nullOrMismatch(_ expected: Any.Type) -> DecodingError {
        guard decodeNil() else { return mismatch(expected) }
        return .valueNotFound(
            expected,
            .init(
                codingPath: codingPath,
                debugDescription: "Cannot get value of type \(expected) -- found null value instead"
            ))
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        if decodeNil(), !(T.self is any ExpressibleByNilLiteral.Type) {
            throw nullOrMismatch(T.self)
        }
        return try decodeValue(T.self)
    }
}

/// The members of one wire object, looked up by name (the last of a repeated name wins, as in ``JSONParser``).
///
/// Kept small: the standard library's box copies it for every field decoded, and only
/// ``members`` (and ``place`` below the top) is reference-counted.
private struct WireKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let wire: WireBytes
    let place: WireCodingPath?
    let members: [WireBytes.Member]
    var codingPath: [any CodingKey] { place?.keys ?? [] }

    var allKeys: [Key] {
        var seen = Set<ByteString>()  // names are text: two spellings are two members
        return members.reversed().compactMap { member -> Key? in
            guard let name = try? wire.key(of: member), seen.insert(ByteString(name)).inserted else { return nil }
            return Key(stringValue: name)
        }.reversed()
    }

    private func find(_ key: Key) -> Range<Int>? {
        let name = key.stringValue
        for member in members.reversed() where wire.member(member, isNamed: name) { return member.value }
        return nil
    }

    private func value(_ key: Key) throws -> WireDecoder {
        guard let range = find(key) else {
            throw DecodingError.keyNotFound(
                key,
                .init(
                    codingPath: codingPath,
                    debugDescription: "No value associated with key \(key) (\"\(key.stringValue)\")."))
        }
        return WireDecoder(wire: wire, range: range, parent: place, key: key)
    }

    func contains(_ key: Key) -> Bool { find(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key).decodeNil() }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(key).decode(Bool.self) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(key).decode(String.self) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(key).decode(Double.self) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(key).decode(Float.self) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(key).decode(Int.self) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(key).decode(Int8.self) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(key).decode(Int16.self) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(key).decode(Int32.self) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(key).decode(Int64.self) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(key).decode(UInt.self) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(key).decode(UInt8.self) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(key).decode(UInt16.self) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(key).decode(UInt32.self) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(key).decode(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(key).decode(T.self) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try value(key).container(keyedBy: NestedKey.self)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try value(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { try superDecoder(forKey: Key(stringValue: "super")!) }

    func superDecoder(forKey key: Key) throws -> any Decoder { try value(key) }
}

/// The elements of one wire array, in order.
private struct WireUnkeyedContainer: UnkeyedDecodingContainer {
    let wire: WireBytes
    let place: WireCodingPath?
    let elements: [Range<Int>]
    var currentIndex = 0
    var codingPath: [any CodingKey] { place?.keys ?? [] }
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private struct Index: CodingKey {
        var stringValue: String { "Index \(intValue ?? 0)" }
        var intValue: Int?
        init(_ index: Int) { intValue = index }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    private mutating func next(_ type: Any.Type) throws -> WireDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type,
                .init(
                    codingPath: codingPath + [Index(currentIndex)], debugDescription: "Unkeyed container is at end."))
        }
        defer { currentIndex += 1 }
        return WireDecoder(wire: wire, range: elements[currentIndex], parent: place, key: Index(currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, wire.isNull(elements[currentIndex]) else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(T.self).decode(T.self) }
    mutating func decode(_ type: String.Type) throws -> String { try next(String.self).decode(String.self) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(Int.self).decode(Int.self) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(Int64.self).decode(Int64.self) }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(Double.self).decode(Double.self) }
    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(Bool.self).decode(Bool.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try next([String: Any].self).container(keyedBy: NestedKey.self)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next([Any].self).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder { try next(Any.self) }
}

/// A place below the top of a decoded value: its container's place and its key there.
final class WireCodingPath {
    let parent: WireCodingPath?
    let key: any CodingKey

    init(parent: WireCodingPath?, key: any CodingKey) {
        self.parent = parent
        self.key = key
    }

    /// The keys from the top down to this place.
    var keys: [any CodingKey] {
        var keys = parent?.keys ?? []
        keys.append(key)
        return keys
    }
}
