import DepotProtocol
import GRDB

/// What a replicated write left in the object tables (entity and join tables), for a cluster log
/// that keeps them as tables of its own (DESIGN.md section 11, docs/cluster.md): the rows it
/// inserted or updated, whole, and the keys of those it deleted; after a model change, the new
/// model and every row.
public struct ObjectTablesChange: Sendable, Equatable {
    /// One table's changes.
    public struct Table: Sendable, Equatable {
        /// The table's name in the store (`e_<Entity>`, `j_<Entity>.<relationship>`).
        public var name: String
        /// The rows inserted or updated, whole: column name to value, as the store holds them.
        public var written: [[String: DatabaseValue]]
        /// The keys of the rows deleted: `[id]` for an entity's row, `[a, b]` for a pair.
        public var deleted: [[Int64]]

        /// A table's changes.
        public init(name: String, written: [[String: DatabaseValue]], deleted: [[Int64]]) {
            self.name = name
            self.written = written
            self.deleted = deleted
        }
    }

    /// The model after the write, when the write changed it: the tables are then rebuilt, and
    /// ``tables`` hold every row of the new model.
    public var model: Schema?
    /// The tables the write changed, each once.
    public var tables: [Table]
    /// With a model change: for each entity table, the highest id it ever gave.
    public var highestIDs: [String: Int64]
    /// The ids of committed saves the write recorded (`save_id`, `transaction_id`, `answer`): a
    /// replica that starts from a snapshot recognizes a save resent with its `saveId`.
    public var savedIDs: [[String: DatabaseValue]] = []
    /// The ids of saves the write forgot (history retention pruned their transactions).
    public var forgottenIDs: [String] = []

    /// The change of a write.
    public init(model: Schema? = nil, tables: [Table], highestIDs: [String: Int64] = [:]) {
        self.model = model
        self.tables = tables
        self.highestIDs = highestIDs
    }

    /// Equal tables, and the same model (by its entities and version).
    public static func == (lhs: ObjectTablesChange, rhs: ObjectTablesChange) -> Bool {
        lhs.tables == rhs.tables && lhs.highestIDs == rhs.highestIDs && lhs.model?.version == rhs.model?.version
            && lhs.model?.descriptions == rhs.model?.descriptions && lhs.savedIDs == rhs.savedIDs
            && lhs.forgottenIDs == rhs.forgottenIDs
    }

    /// The rows a changeset touched (`changedRows`, ``ChangeSession/changedRows(_:)``: their keys
    /// name the object rows, their values the save ids), read whole from `db` (the write's own
    /// open transaction).
    static func rows(_ db: Database, changedRows: [ChangedRow]) throws -> ObjectTablesChange {
        var tables: [Table] = []
        let objectRows = changedRows.filter { $0.table.hasPrefix("e_") || $0.table.hasPrefix("j_") }
        for (name, written, deleted) in try ChangeSession.changedKeys(objectRows) {
            // The changeset also carries the ids of committed saves (``SaveIdLog``): not objects.
            var rows: [[String: DatabaseValue]] = []
            if name.hasPrefix("j_") {
                rows = written.map { ["a": $0[0].databaseValue, "b": $0[1].databaseValue] }
            } else {
                let table = EntitySchema.quote(name)
                // Chunks stay under SQLite's limit of bound parameters.
                for start in stride(from: 0, to: written.count, by: 500) {
                    let ids = written[start..<min(start + 500, written.count)].map { $0[0] }
                    let marks = Array(repeating: "?", count: ids.count).joined(separator: ",")
                    rows += try Row.fetchAll(
                        db, sql: "SELECT * FROM \(table) WHERE id IN (\(marks))", arguments: StatementArguments(ids)
                    ).map(Self.columns)
                }
            }
            tables.append(Table(name: name, written: rows, deleted: deleted))
        }
        var change = ObjectTablesChange(tables: tables)
        let names = try db.columns(in: SaveIdLog.table).map(\.name)
        for row in changedRows where row.table == SaveIdLog.table {
            switch row.operation {
            case .insert, .update:
                // An update carries only what changed: the row is read whole, as the write left it.
                let key = (row.operation == .insert ? row.new : row.old).first ?? nil
                if let saved = try Row.fetchOne(
                    db, sql: "SELECT * FROM depot_save_id WHERE save_id = ?", arguments: [key ?? .null])
                {
                    change.savedIDs.append(Self.columns(saved))
                }
            case .delete:
                if let index = names.firstIndex(of: "save_id"), case .string(let id)? = row.old[index]?.storage {
                    change.forgottenIDs.append(id)
                }
            }
        }
        return change
    }

    /// Every row of every table of `schema`, as `db` holds them.
    static func everything(_ db: Database, schema: Schema) throws -> ObjectTablesChange {
        var tables: [Table] = []
        for entity in schema.entities {
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM \(entity.table) ORDER BY id").map(Self.columns)
            tables.append(Table(name: entity.tableName, written: rows, deleted: []))
            for (_, join) in entity.joins.sorted(by: { $0.key < $1.key }) where join.isFirstSide {
                let pairs = try Row.fetchAll(db, sql: "SELECT a, b FROM \(join.table) ORDER BY a, b").map(Self.columns)
                tables.append(Table(name: join.name, written: pairs, deleted: []))
            }
        }
        let highestIDs = try Dictionary(
            Row.fetchAll(db, sql: "SELECT name, seq FROM sqlite_sequence WHERE name GLOB 'e_*'").map {
                (row: Row) -> (String, Int64) in (row[0], row[1])
            }, uniquingKeysWith: max)
        return ObjectTablesChange(model: schema, tables: tables, highestIDs: highestIDs)
    }

    /// A row's columns by name, without shadow columns: each SQLite store computes its own.
    private static func columns(_ row: Row) -> [String: DatabaseValue] {
        Dictionary(
            row.lazy.filter { !EntitySchema.isShadowColumn($0.0) }.map { ($0.0, $0.1) },
            uniquingKeysWith: { first, _ in first })
    }
}
