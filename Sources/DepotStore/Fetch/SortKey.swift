import DepotProtocol
import GRDB

/// One sort-key value, ordered exactly as SQLite's `ORDER BY` orders stored
/// values: NULL first, then numbers (integers and reals compared by value),
/// then text (bytewise UTF-8, the BINARY collation), then blobs.
///
/// The fetched-results index keeps these instead of whole objects, so that a
/// changed row's position can be found without asking the database.
public enum SortValue: Hashable, Sendable {
    /// SQL NULL.
    case null
    /// An INTEGER.
    case integer(Int64)
    /// A REAL.
    case real(Double)
    /// TEXT.
    case text(String)
    /// A BLOB.
    case blob([UInt8])

    /// The value read from a row column.
    public init(_ value: DatabaseValue) {
        switch value.storage {
        case .null: self = .null
        case .int64(let number): self = .integer(number)
        case .double(let number): self = .real(number)
        case .string(let text): self = .text(text)
        case .blob(let data): self = .blob(Array(data))
        }
    }

    /// Equal as SQLite's `IS` sees stored values of one type: text by its UTF-8
    /// bytes (Swift's `String ==` would join canonically equivalent spellings,
    /// and with them two groups or sections the store keeps apart).
    public static func == (lhs: SortValue, rhs: SortValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.integer(let a), .integer(let b)): a == b
        case (.real(let a), .real(let b)): a == b
        case (.text(let a), .text(let b)): a.bytesEqual(b)
        case (.blob(let a), .blob(let b)): a == b
        default: false
        }
    }

    /// Hashes text by its UTF-8 bytes, as ``==`` compares it.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(rank)
        switch self {
        case .null: break
        case .integer(let number): hasher.combine(number)
        case .real(let number): hasher.combine(number)
        case .text(let text): ByteString.hash(text, into: &hasher)
        case .blob(let bytes): hasher.combine(bytes)
        }
    }

    private var rank: Int {
        switch self {
        case .null: 0
        case .integer, .real: 1
        case .text: 2
        case .blob: 3
        }
    }

    /// -1, 0 or 1 as SQLite would order `self` against `other` ascending.
    public func compare(_ other: SortValue) -> Int {
        switch (self, other) {
        case (.integer(let a), .integer(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        case (.real(let a), .real(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        case (.integer(let a), .real(let b)): return Double(a) < b ? -1 : (Double(a) == b ? 0 : 1)
        case (.real(let a), .integer(let b)): return a < Double(b) ? -1 : (a == Double(b) ? 0 : 1)
        case (.text(let a), .text(let b)): return Self.compareBytes(a.utf8, b.utf8)
        case (.blob(let a), .blob(let b)): return Self.compareBytes(a, b)
        case (.null, .null): return 0
        default: return rank < other.rank ? -1 : 1
        }
    }

    private static func compareBytes<C: Collection>(_ a: C, _ b: C) -> Int where C.Element == UInt8 {
        var left = a.makeIterator()
        var right = b.makeIterator()
        while true {
            switch (left.next(), right.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let x?, let y?) where x != y: return x < y ? -1 : 1
            default: continue
            }
        }
    }

    /// The section name: the value's text, `""` for nil (as `NSFetchedResultsController` names sections).
    public var sectionName: String {
        switch self {
        case .null: ""
        case .integer(let number): String(number)
        case .real(let number):
            number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
        case .text(let text): text
        case .blob(let bytes): bytes.map { String($0, radix: 16) }.joined()
        }
    }
}

/// The sort-key values of one object, compared under the request's sort directions.
///
/// The first value is stored inline and the rest in an array that stays
/// empty (no allocation) for single-key sorts: an index entry of a one-key
/// subscription is then 40 bytes with its id.
public struct SortKey: Hashable, Sendable {
    /// The first sort key's value (also the section value).
    public var first: SortValue
    /// The values of the other sort keys.
    public var rest: [SortValue]

    /// Creates a key from one value per sort descriptor (at least one).
    public init(values: [SortValue]) {
        first = values.first ?? .null
        rest = Array(values.dropFirst())
    }

    /// The values, one per sort descriptor.
    public var values: [SortValue] { [first] + rest }

    /// -1, 0 or 1 under `ascending` (one flag per value).
    public func compare(_ other: SortKey, ascending: [Bool]) -> Int {
        let order = first.compare(other.first)
        if order != 0 { return ascending[0] ? order : -order }
        for index in rest.indices {
            let order = rest[index].compare(other.rest[index])
            if order != 0 { return ascending[index + 1] ? order : -order }
        }
        return 0
    }
}
