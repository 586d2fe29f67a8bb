import DepotProtocol

/// Model names (attributes, relationships, join tables) to what they name, looked up by their
/// UTF-8 bytes (DESIGN.md §4): a Swift dictionary keyed by `String` would also find `"Key"` by
/// the canonically equivalent `"\u{212A}ey"`, which is another name, unknown to the model.
///
/// Iterates like the dictionary it wraps, as `(key, value)` pairs.
public struct NameTable<Value: Sendable>: Collection, Sendable {
    /// A name and what it names.
    public typealias Element = (key: String, value: Value)
    /// A position in the table.
    public typealias Index = Dictionary<String, Value>.Index

    private let storage: [String: Value]

    /// The table of `pairs`, whose names are unique.
    init(_ pairs: some Sequence<(String, Value)>) {
        storage = Dictionary(uniqueKeysWithValues: pairs)
    }

    /// What `name` names, when it has exactly these bytes.
    public subscript(_ name: String) -> Value? {
        guard let index = storage.index(forKey: name), storage[index].key.bytesEqual(name) else { return nil }
        return storage[index].value
    }

    /// The names.
    public var keys: Dictionary<String, Value>.Keys { storage.keys }
    /// What they name.
    public var values: Dictionary<String, Value>.Values { storage.values }

    /// The first position.
    public var startIndex: Index { storage.startIndex }
    /// The position past the last.
    public var endIndex: Index { storage.endIndex }
    /// The position after `index`.
    public func index(after index: Index) -> Index { storage.index(after: index) }
    /// The pair at `position`.
    public subscript(position: Index) -> Element { storage[position] }
}
