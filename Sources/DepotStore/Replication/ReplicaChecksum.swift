import Foundation
import GRDB

/// A checksum of a replica's objects (DESIGN.md section 11), kept as LiteFS keeps its rolling
/// checksum: the XOR of one 64-bit hash per row of every object table (`e_…`, `j_…`), each over
/// the table's name and the row's columns by name. A change updates it from the rows it touched
/// (XOR out the row before, XOR in the row after), so each write costs its own rows, not the
/// store; ``full(_:)`` reads every row, at start-up.
///
/// The hash sees values as the store means them, not as one file stores them: an integral REAL
/// counts as the INTEGER it equals (a column added later has no type affinity, and a replica
/// started from a snapshot may hold `2.0` where another holds `2`).
public enum ReplicaChecksum {
    /// The checksum of every object row `db` holds.
    public static func full(_ db: Database) throws -> UInt64 {
        var checksum: UInt64 = 0
        for table in try objectTables(db) {
            let rows = try Row.fetchCursor(db, sql: "SELECT * FROM \(EntitySchema.quote(table))")
            while let row = try rows.next() {
                checksum ^= hash(table: table, columns: row.map { ($0.0, $0.1) })
            }
        }
        return checksum
    }

    /// What `changeset`, just applied to (or just recorded in) `db`, did to the checksum: the rows
    /// it touched, before and after, XORed. An update's changeset carries only the changed columns:
    /// the rest are read from the row as it is now.
    public static func delta(_ db: Database, changeset: [UInt8]) throws -> UInt64 {
        try delta(db, rows: ChangeSession.changedRows(changeset))
    }

    /// ``delta(_:changeset:)`` from the changeset's rows, already read (``ChangeSession/changedRows(_:)``).
    static func delta(_ db: Database, rows: [ChangedRow]) throws -> UInt64 {
        var delta: UInt64 = 0
        var columnsByTable: [String: [String]] = [:]
        for change in rows where isObjectTable(change.table) {
            let names: [String]
            if let known = columnsByTable[change.table] {
                names = known
            } else {
                names = try db.columns(in: change.table).map(\.name)
                columnsByTable[change.table] = names
            }
            guard names.count == change.primaryKey.count else {
                throw ReplicationError.diverged(
                    "the table \(change.table) has \(names.count) columns here, the changeset \(change.primaryKey.count)"
                )
            }
            switch change.operation {
            case .insert:
                delta ^= hash(table: change.table, columns: zip(names, change.new.map { $0 ?? .null }).map { ($0, $1) })
            case .delete:
                delta ^= hash(table: change.table, columns: zip(names, change.old.map { $0 ?? .null }).map { ($0, $1) })
            case .update:
                let keys = names.indices.filter { change.primaryKey[$0] }
                let condition = keys.map { "\(EntitySchema.quote(names[$0])) = ?" }.joined(separator: " AND ")
                guard
                    let row = try Row.fetchOneCached(
                        db, sql: "SELECT * FROM \(EntitySchema.quote(change.table)) WHERE \(condition)",
                        arguments: StatementArguments(keys.map { change.old[$0] ?? .null }))
                else {
                    throw ReplicationError.diverged("a row the changeset updates in \(change.table) is missing")
                }
                let now = names.map { row[$0] as DatabaseValue }
                let before = names.indices.map { change.old[$0] ?? now[$0] }
                delta ^= hash(table: change.table, columns: Array(zip(names, before)))
                delta ^= hash(table: change.table, columns: Array(zip(names, now)))
            }
        }
        return delta
    }

    /// The hash of one row of `table`.
    static func hash(table: String, columns: [(String, DatabaseValue)]) -> UInt64 {
        hash(table: table, orderedColumns: columns.filter { !EntitySchema.isShadowColumn($0.0) }.sorted { $0.0 < $1.0 })
    }

    /// ``hash(table:columns:)`` of columns already sorted by name, without shadow columns.
    static func hash(table: String, orderedColumns columns: [(String, DatabaseValue)]) -> UInt64 {
        var hasher = FNV()
        hasher.add(table)
        for (name, value) in columns {
            hasher.add(name)
            switch value.storage {
            case .null:
                hasher.add(byte: 0)
            case .int64(let number):
                hasher.add(byte: 1)
                hasher.add(number)
            case .double(let number):
                if number.rounded() == number, abs(number) < 9.2e18 {
                    hasher.add(byte: 1)
                    hasher.add(Int64(number))
                } else {
                    hasher.add(byte: 2)
                    hasher.add(Int64(bitPattern: number.bitPattern))
                }
            case .string(let text):
                hasher.add(byte: 3)
                hasher.add(text)
            case .blob(let data):
                hasher.add(byte: 4)
                hasher.add(Int64(data.count))
                for byte in data { hasher.add(byte: byte) }
            }
        }
        return hasher.finalized
    }

    /// The object tables `db` holds (entities' and many-to-many relationships').
    static func objectTables(_ db: Database) throws -> [String] {
        try String.fetchAll(
            db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND (name GLOB 'e_*' OR name GLOB 'j_*')")
    }

    /// Whether `name` is an object table (`e_…`, `j_…`).
    static func isObjectTable(_ name: String) -> Bool { name.hasPrefix("e_") || name.hasPrefix("j_") }

    /// FNV-1a, 64 bits, finished with SplitMix64's mix so that XORed hashes spread over every bit.
    private struct FNV {
        private var state: UInt64 = 0xcbf2_9ce4_8422_2325

        mutating func add(byte: UInt8) { state = (state ^ UInt64(byte)) &* 0x100_0000_01b3 }

        mutating func add(_ number: Int64) {
            var bits = UInt64(bitPattern: number)
            for _ in 0..<8 {
                add(byte: UInt8(truncatingIfNeeded: bits))
                bits >>= 8
            }
        }

        mutating func add(_ text: String) {
            add(Int64(text.utf8.count))
            for byte in text.utf8 { add(byte: byte) }
        }

        var finalized: UInt64 {
            var mixed = state
            mixed = (mixed ^ (mixed >> 30)) &* 0xbf58_476d_1ce4_e5b9
            mixed = (mixed ^ (mixed >> 27)) &* 0x94d0_49bb_1331_11eb
            return mixed ^ (mixed >> 31)
        }
    }
}

extension Store {
    /// The replica's checksum as it keeps it (``ReplicaChecksum``), and the offset between it and
    /// the log's: non-zero only when the snapshot it started from differed from the log's state
    /// (a row changed by hand in PostgreSQL's tables, docs/cluster.md).
    static func storedChecksum(_ db: Database) throws -> (checksum: UInt64, offset: UInt64)? {
        guard
            let checksum = try String.fetchOneCached(db, sql: "SELECT value FROM depot_meta WHERE key = 'checksum'")
                .flatMap({ UInt64($0) })
        else { return nil }
        let offset =
            try String.fetchOneCached(db, sql: "SELECT value FROM depot_meta WHERE key = 'checksumOffset'")
            .flatMap { UInt64($0) } ?? 0
        return (checksum, offset)
    }

    static func saveChecksum(_ db: Database, _ checksum: UInt64, offset: UInt64? = nil) throws {
        try db.executeCached(
            sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('checksum', ?)",
            arguments: [String(checksum)])
        if let offset {
            try db.execute(
                sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('checksumOffset', ?)",
                arguments: [String(offset)])
        }
    }
}
