#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// User text compared as Depot and SQLite compare it: by its UTF-8 bytes
/// (DESIGN.md §4, "Text is its UTF-8 bytes").
///
/// Swift's `String` is equal, hashes and orders by Unicode canonical
/// equivalence (`"jos\u{E9}" == "jose\u{301}"`), SQLite's BINARY collation by
/// bytes. Wherever user text (attribute values, key names, group keys, sharing
/// keys) is a dictionary key, a set member or sorted, wrap it in a
/// `ByteString` so that two spellings stay two values; compare bare strings
/// with ``ByteString/equal(_:_:)`` and ``ByteString/precedes(_:_:)``.
///
/// ```swift
/// var seen: Set<ByteString> = []
/// seen.insert(ByteString("jos\u{E9}"))
/// seen.contains(ByteString("jose\u{301}"))  // false: other bytes
/// ```
public struct ByteString: Hashable, Comparable, Sendable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The text.
    public let string: String

    /// Wraps `string`.
    public init(_ string: String) { self.string = string }

    /// Wraps a literal.
    public init(stringLiteral value: String) { string = value }

    /// The text itself.
    public var description: String { string }

    /// The text as a quoted JSON string with every non-ASCII scalar escaped
    /// (`"jose\u0301"`), so that two spellings read apart in an error message.
    public var escaped: String {
        var out = "\""
        for scalar in string.unicodeScalars {
            if scalar.isASCII, scalar.value >= 0x20, scalar != "\"", scalar != "\\" {
                out.unicodeScalars.append(scalar)
            } else {
                for unit in String(scalar).utf16 {
                    let hex = String(unit, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                }
            }
        }
        return out + "\""
    }

    /// Equal when the UTF-8 bytes are.
    public static func == (lhs: ByteString, rhs: ByteString) -> Bool { equal(lhs.string, rhs.string) }

    /// Ordered as SQLite's BINARY collation orders: by UTF-8 bytes.
    public static func < (lhs: ByteString, rhs: ByteString) -> Bool { precedes(lhs.string, rhs.string) }

    /// Hashes the UTF-8 bytes.
    public func hash(into hasher: inout Hasher) { Self.hash(string, into: &hasher) }

    /// Whether `a` and `b` have the same UTF-8 bytes (Swift's `==` on `String`
    /// also holds for canonically equivalent spellings).
    public static func equal(_ a: String, _ b: String) -> Bool {
        let count = a.utf8.count
        guard count == b.utf8.count else { return false }
        // Native strings are contiguous UTF-8: one memcmp, not a walk of two UTF8Views.
        return compareContiguous(a, b) { pa, pb in
            pa.baseAddress == pb.baseAddress || memcmp(pa.baseAddress!, pb.baseAddress!, count) == 0
        } ?? a.utf8.elementsEqual(b.utf8)
    }

    /// Whether `a` sorts before `b` by UTF-8 bytes (which is code point order).
    public static func precedes(_ a: String, _ b: String) -> Bool {
        compareContiguous(a, b) { pa, pb in
            let order = memcmp(pa.baseAddress!, pb.baseAddress!, min(pa.count, pb.count))
            return order < 0 || (order == 0 && pa.count < pb.count)
        } ?? a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// `body` on both strings' UTF-8 storage, when both are contiguous and non-empty.
    private static func compareContiguous(
        _ a: String, _ b: String, _ body: (UnsafeBufferPointer<UInt8>, UnsafeBufferPointer<UInt8>) -> Bool
    ) -> Bool? {
        guard !a.utf8.isEmpty, !b.utf8.isEmpty else { return nil }
        return a.utf8.withContiguousStorageIfAvailable { pa in
            b.utf8.withContiguousStorageIfAvailable { pb in body(pa, pb) }
        } ?? nil
    }

    /// Feeds `text`'s UTF-8 bytes, and their count, to `hasher`.
    public static func hash(_ text: String, into hasher: inout Hasher) {
        var text = text
        text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        hasher.combine(text.utf8.count)
    }
}

extension String {
    /// Whether this text and `other` have the same UTF-8 bytes: equality as the
    /// store sees it (Swift's `==` folds canonically equivalent spellings).
    @inlinable
    public func bytesEqual(_ other: String) -> Bool { ByteString.equal(self, other) }

    /// Whether this text sorts before `other` by UTF-8 bytes, as SQLite's BINARY collation.
    @inlinable
    public func bytesPrecede(_ other: String) -> Bool { ByteString.precedes(self, other) }
}

extension Sequence where Element == String {
    /// The strings in UTF-8 byte order (Swift's `sorted()` orders by canonical equivalence).
    public func sortedByBytes() -> [String] { sorted { $0.bytesPrecede($1) } }
}
