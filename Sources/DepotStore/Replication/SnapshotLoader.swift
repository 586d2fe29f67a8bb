import Foundation
import GRDB
import GRDBSQLite

/// Fills the tables of an empty replica from a snapshot's batches (``ReplicaSnapshot/Batch``) as
/// fast as SQLite takes rows, inside the caller's transaction: one prepared INSERT per table,
/// reused with fresh bindings for every row through the C API; the tables' indexes dropped before
/// the first row and built once after the last (``finish()``); the checksum of the object tables
/// (``ReplicaChecksum``) kept from the rows as they are bound, so no second pass reads them back.
///
/// One prepared single-row INSERT, not multi-row INSERTs: SQLite's cost per executed statement is
/// small against the B-tree work of a row, and one statement serves every batch's size.
struct SnapshotLoader {
    private let db: Database
    /// The INSERT of each table, for the columns its batches carry.
    private var inserts: [String: Insert] = [:]
    /// The statements that create the indexes dropped for the load, in their original order.
    private let deferredIndexes: [String]
    /// The checksum of the object rows inserted so far.
    private(set) var checksum: UInt64 = 0

    /// Drops the indexes of `tables` (those created by statements, not the primary keys'), to be
    /// built again by ``finish()``: building an index once over sorted keys is far cheaper than
    /// keeping it as rows arrive in another order.
    init(_ db: Database, tables: [String]) throws {
        self.db = db
        var indexes: [String] = []
        for table in tables {
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
                arguments: [table])
            for row in rows {
                let name: String = row["name"]
                indexes.append(row["sql"])
                try db.execute(sql: "DROP INDEX \(EntitySchema.quote(name))")
            }
        }
        deferredIndexes = indexes
    }

    /// Inserts `batch`'s rows into `table`, each value as it comes.
    mutating func insert(into table: String, _ batch: ReplicaSnapshot.Batch) throws {
        guard batch.count > 0 else { return }
        if inserts[table]?.columns != batch.columns {
            inserts[table] = try Insert(db, table: table, columns: batch.columns)
        }
        let insert = inserts[table]!
        let width = batch.columns.count
        var row: [(String, DatabaseValue)] = []
        row.reserveCapacity(insert.hashed.count)
        for start in stride(from: 0, to: batch.values.count, by: width) {
            try insert.run(batch.values, from: start, db)
            if insert.isObjectTable {
                row.removeAll(keepingCapacity: true)
                for index in insert.hashed { row.append((batch.columns[index], batch.values[start + index])) }
                checksum ^= ReplicaChecksum.hash(table: table, orderedColumns: row)
            }
        }
    }

    /// Builds the indexes dropped for the load.
    func finish() throws {
        for statement in deferredIndexes { try db.execute(sql: statement) }
    }

    /// One table's prepared INSERT, bound and stepped through the C API.
    private final class Insert {
        let columns: [String]
        /// Whether the table's rows count in the checksum (an entity's or a join table).
        let isObjectTable: Bool
        /// The columns the checksum hashes, by index into ``columns``, in the order it hashes them.
        let hashed: [Int]
        private let statement: Statement

        init(_ db: Database, table: String, columns: [String]) throws {
            self.columns = columns
            isObjectTable = ReplicaChecksum.isObjectTable(table)
            hashed = columns.indices.filter { !EntitySchema.isShadowColumn(columns[$0]) }
                .sorted { columns[$0] < columns[$1] }
            statement = try db.makeStatement(
                sql: """
                    INSERT INTO \(EntitySchema.quote(table)) (\(columns.map(EntitySchema.quote).joined(separator: ", ")))
                    VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))
                    """)
        }

        /// Inserts the row of ``columns``.count values at `start` of `values`.
        func run(_ values: [DatabaseValue], from start: Int, _ db: Database) throws {
            let handle = statement.sqliteStatement
            for index in columns.indices {
                let parameter = Int32(index + 1)
                switch values[start + index].storage {
                case .null: sqlite3_bind_null(handle, parameter)
                case .int64(let number): sqlite3_bind_int64(handle, parameter, number)
                case .double(let number): sqlite3_bind_double(handle, parameter, number)
                case .string(let text): sqlite3_bind_text(handle, parameter, text, -1, Self.transient)
                case .blob(let data):
                    data.withUnsafeBytes { bytes in
                        _ = sqlite3_bind_blob(handle, parameter, bytes.baseAddress, Int32(bytes.count), Self.transient)
                    }
                }
            }
            let code = sqlite3_step(handle)
            guard code == SQLITE_DONE else {
                let message = String(cString: sqlite3_errmsg(db.sqliteConnection))
                sqlite3_reset(handle)
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: statement.sql)
            }
            sqlite3_reset(handle)
        }

        private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    }
}
