import DepotProtocol
import Foundation
import GRDB

/// Fetched-results caches on disk (`cacheName`): a request's ordered ids and
/// sort keys as of a transaction, so that a later identical subscription,
/// even after a restart, starts from them and only catches up with history.
public struct ResultsCacheEntry: Sendable {
    /// The request the rows belong to (the engine's sharing key).
    public var requestKey: String
    /// The transaction the rows reflect.
    public var transaction: Int64
    /// The rows in order.
    public var rows: [KeyedRow]

    /// Creates an entry.
    public init(requestKey: String, transaction: Int64, rows: [KeyedRow]) {
        self.requestKey = requestKey
        self.transaction = transaction
        self.rows = rows
    }
}

extension Store {
    static func createResultsCacheTable(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS depot_results_cache (
                    name TEXT PRIMARY KEY, request TEXT NOT NULL, "transaction" INTEGER NOT NULL, rows BLOB NOT NULL)
                """)
    }

    /// Writes the cache `name`, replacing what was there.
    public func saveResultsCache(_ name: String, _ entry: ResultsCacheEntry) throws(RPCError) {
        let blob = Data(ResultsCacheCoding.encode(entry.rows))
        try writeLocally { db in
            try Self.createResultsCacheTable(db)
            try db.execute(
                sql:
                    #"INSERT OR REPLACE INTO depot_results_cache (name, request, "transaction", rows) VALUES (?, ?, ?, ?)"#,
                arguments: [name, entry.requestKey, entry.transaction, blob])
        }
    }

    /// Reads the cache `name`, if any.
    public func loadResultsCache(_ name: String) throws(RPCError) -> ResultsCacheEntry? {
        try read { db in
            guard try db.tableExists("depot_results_cache"),
                let row = try Row.fetchOne(
                    db, sql: #"SELECT request, "transaction", rows FROM depot_results_cache WHERE name = ?"#,
                    arguments: [name])
            else { return nil }
            let blob: Data = row["rows"]
            guard let rows = ResultsCacheCoding.decode(Array(blob)) else { return nil }
            return ResultsCacheEntry(requestKey: row["request"], transaction: row["transaction"], rows: rows)
        }
    }

    /// Removes the cache `name`, or every cache when `nil`; returns how many were removed.
    @discardableResult
    public func deleteResultsCache(_ name: String?) throws(RPCError) -> Int {
        try writeLocally { db in
            try Self.createResultsCacheTable(db)
            if let name {
                try db.execute(sql: "DELETE FROM depot_results_cache WHERE name = ?", arguments: [name])
            } else {
                try db.execute(sql: "DELETE FROM depot_results_cache")
            }
            return db.changesCount
        }
    }
}

/// A compact binary form of keyed rows: per row the id, the value count, then
/// each value as a tag byte and its payload (little-endian numbers,
/// length-prefixed bytes).
enum ResultsCacheCoding {
    static func encode(_ rows: [KeyedRow]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(rows.count * 20)
        func append(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        append(UInt64(rows.count))
        for row in rows {
            append(UInt64(bitPattern: row.id))
            bytes.append(UInt8(row.key.values.count))
            for value in row.key.values {
                switch value {
                case .null: bytes.append(0)
                case .integer(let number):
                    bytes.append(1)
                    append(UInt64(bitPattern: number))
                case .real(let number):
                    bytes.append(2)
                    append(number.bitPattern)
                case .text(let text):
                    bytes.append(3)
                    append(UInt64(text.utf8.count))
                    bytes.append(contentsOf: text.utf8)
                case .blob(let data):
                    bytes.append(4)
                    append(UInt64(data.count))
                    bytes.append(contentsOf: data)
                }
            }
        }
        return bytes
    }

    static func decode(_ bytes: [UInt8]) -> [KeyedRow]? {
        var offset = 0
        func number() -> UInt64? {
            guard offset + 8 <= bytes.count else { return nil }
            var value: UInt64 = 0
            for index in 0..<8 { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
            offset += 8
            return value
        }
        func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, offset + count <= bytes.count else { return nil }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }
        guard let count = number(), count < UInt64(bytes.count) else { return nil }
        var rows: [KeyedRow] = []
        rows.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let id = number(), let valueCount = take(1)?.first else { return nil }
            var values: [SortValue] = []
            for _ in 0..<valueCount {
                guard let tag = take(1)?.first else { return nil }
                switch tag {
                case 0: values.append(.null)
                case 1:
                    guard let raw = number() else { return nil }
                    values.append(.integer(Int64(bitPattern: raw)))
                case 2:
                    guard let raw = number() else { return nil }
                    values.append(.real(Double(bitPattern: raw)))
                case 3:
                    guard let length = number(), let slice = take(Int(length)) else { return nil }
                    values.append(.text(String(decoding: slice, as: UTF8.self)))
                case 4:
                    guard let length = number(), let slice = take(Int(length)) else { return nil }
                    values.append(.blob(Array(slice)))
                default: return nil
                }
            }
            rows.append(KeyedRow(id: Int64(bitPattern: id), key: SortKey(values: values)))
        }
        return rows
    }
}
