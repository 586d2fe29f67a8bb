import DepotProtocol
import GRDB

/// A column value compared as SQLite's BINARY collation compares it: text by
/// its UTF-8 bytes (DESIGN.md §4). GRDB's `DatabaseValue ==` compares text
/// with Swift's `String ==`, which holds for canonically equivalent spellings
/// (`"jos\u{E9}"`, `"jose\u{301}"`) that the store keeps apart; use this
/// wherever stored values are compared or hashed (change detection,
/// uniqueness within a save or batch).
struct StoredValue: Hashable {
    /// The value.
    let value: DatabaseValue

    /// Wraps `value`.
    init(_ value: DatabaseValue) { self.value = value }

    static func == (lhs: StoredValue, rhs: StoredValue) -> Bool { lhs.value.isSame(as: rhs.value) }

    func hash(into hasher: inout Hasher) {
        if case .string(let text) = value.storage {
            hasher.combine(1 as UInt8)
            ByteString.hash(text, into: &hasher)
        } else {
            hasher.combine(0 as UInt8)
            hasher.combine(value)
        }
    }
}

extension DatabaseValue {
    /// Whether this and `other` are the same stored value: text by UTF-8 bytes,
    /// everything else as GRDB compares it.
    func isSame(as other: DatabaseValue) -> Bool {
        switch (storage, other.storage) {
        case (.string(let a), .string(let b)): a.bytesEqual(b)
        case (.string, _), (_, .string): false
        default: self == other
        }
    }
}
