/// Encodes `Encodable` types straight to a ``JSONValue``, without Foundation's
/// `JSONEncoder` and a re-parse: every client call's params pass through here,
/// and fields typed `JSONValue` (object values, arguments) are taken as they are.
struct JSONValueEncoder {
    static func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        if let json = value as? JSONValue { return json }
        let root = Node()
        try value.encode(to: ValueEncoder(node: root, codingPath: []))
        return root.value
    }
}

/// A value being built; containers hold child nodes until the encoding finishes.
/// Children are appended in place (a container's array is never copied).
private final class Node {
    enum Kind {
        case value, object, array
    }

    var kind = Kind.value
    var scalar: JSONValue = .null
    var members: [(String, Node)] = []
    var elements: [Node] = []

    var value: JSONValue {
        switch kind {
        case .value: scalar
        case .object: .object(Dictionary(members.map { ($0.0, $0.1.value) }, uniquingKeysWith: { _, last in last }))
        case .array: .array(elements.map(\.value))
        }
    }

    func set(_ value: JSONValue) {
        kind = .value
        scalar = value
    }

    func child(forKey key: String) -> Node {
        kind = .object
        let node = Node()
        members.append((key, node))
        return node
    }

    func appendChild() -> Node {
        kind = .array
        let node = Node()
        elements.append(node)
        return node
    }
}

private struct ValueEncoder: Encoder {
    let node: Node
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        node.kind = .object
        return KeyedEncodingContainer(KeyedContainer<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        node.kind = .array
        return UnkeyedContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleContainer(node: node, codingPath: codingPath)
    }
}

private func encodeValue<T: Encodable>(_ value: T, into node: Node, codingPath: [any CodingKey]) throws {
    if let json = value as? JSONValue {
        node.set(json)
        return
    }
    if T.self == [[String: JSONValue]].self {
        // A batch's objects: no container per object and member.
        node.set(.array((value as! [[String: JSONValue]]).map(JSONValue.object)))
        return
    }
    try value.encode(to: ValueEncoder(node: node, codingPath: codingPath))
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let codingPath: [any CodingKey]

    mutating func encodeNil(forKey key: Key) throws { node.child(forKey: key.stringValue).set(.null) }
    mutating func encode(_ value: Bool, forKey key: Key) throws {
        node.child(forKey: key.stringValue).set(.bool(value))
    }
    mutating func encode(_ value: String, forKey key: Key) throws {
        node.child(forKey: key.stringValue).set(.string(value))
    }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        node.child(forKey: key.stringValue).set(.double(value))
    }
    mutating func encode(_ value: Int, forKey key: Key) throws {
        node.child(forKey: key.stringValue).set(.int(Int64(value)))
    }
    mutating func encode(_ value: Int64, forKey key: Key) throws {
        node.child(forKey: key.stringValue).set(.int(value))
    }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try encodeValue(value, into: node.child(forKey: key.stringValue), codingPath: codingPath + [key])
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        ValueEncoder(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).container(
            keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        ValueEncoder(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder {
        ValueEncoder(node: node.child(forKey: "super"), codingPath: codingPath)
    }
    mutating func superEncoder(forKey key: Key) -> any Encoder {
        ValueEncoder(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key])
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let node: Node
    let codingPath: [any CodingKey]
    var count: Int { node.elements.count }

    mutating func encodeNil() throws { node.appendChild().set(.null) }
    mutating func encode(_ value: Bool) throws { node.appendChild().set(.bool(value)) }
    mutating func encode(_ value: String) throws { node.appendChild().set(.string(value)) }
    mutating func encode(_ value: Double) throws { node.appendChild().set(.double(value)) }
    mutating func encode(_ value: Int) throws { node.appendChild().set(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { node.appendChild().set(.int(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try encodeValue(value, into: node.appendChild(), codingPath: codingPath)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<
        NestedKey
    > {
        ValueEncoder(node: node.appendChild(), codingPath: codingPath).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        ValueEncoder(node: node.appendChild(), codingPath: codingPath).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder { ValueEncoder(node: node.appendChild(), codingPath: codingPath) }
}

private struct SingleContainer: SingleValueEncodingContainer {
    let node: Node
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.set(.null) }
    mutating func encode(_ value: Bool) throws { node.set(.bool(value)) }
    mutating func encode(_ value: String) throws { node.set(.string(value)) }
    mutating func encode(_ value: Double) throws { node.set(.double(value)) }
    mutating func encode(_ value: Float) throws { node.set(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { node.set(.int(value)) }
    mutating func encode(_ value: UInt) throws { node.set(.int(Int64(clamping: value))) }
    mutating func encode(_ value: UInt8) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { node.set(.int(Int64(value))) }
    mutating func encode(_ value: UInt64) throws { node.set(.int(Int64(clamping: value))) }
    mutating func encode<T: Encodable>(_ value: T) throws { try encodeValue(value, into: node, codingPath: codingPath) }
}
