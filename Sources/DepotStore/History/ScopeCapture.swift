import DepotProtocol
import GRDB

/// The values, before and after one transaction, of the keys that row-level
/// scopes read (DESIGN.md §2): recorded in history with each change of an
/// entity some read rule reads, so that `store/history` can tell exactly
/// whether a scoped key could see an object before and after the change.
public struct RecordedValues: Sendable, Hashable {
    /// One touched row's values, in the order of ``keys``.
    public struct Change: Sendable, Hashable {
        /// Before the transaction; `nil` for an insert.
        public var before: [JSONValue]?
        /// After it; `nil` for a delete.
        public var after: [JSONValue]?

        /// Creates a change.
        public init(before: [JSONValue]?, after: [JSONValue]?) {
            self.before = before
            self.after = after
        }
    }

    /// The keys recorded (attributes and to-one relationships), sorted.
    public var keys: [String]
    /// The touched rows' values.
    public var rows: [Int64: Change]

    /// Creates recorded values.
    public init(keys: [String], rows: [Int64: Change]) {
        self.keys = keys
        self.rows = rows
    }

    /// `values` as a wire object of `entity`'s `row` holding just the recorded keys.
    public func object(_ values: [JSONValue], entity: String, row: Int64) -> [String: JSONValue] {
        var object: [String: JSONValue] = ["id": .string("\(entity)/\(row)"), "entity": .string(entity)]
        for (key, value) in zip(keys, values) { object[key] = value }
        return object
    }
}

/// Captures, on the writer's connection, what an object held before a write
/// changed it: per entity whose keys are recorded, a temporary table and two
/// temporary triggers (before update, before delete) that keep each row's
/// first old values of the transaction. ``HistoryLog`` reads them when it
/// records the transaction, with the values after, and empties them.
///
/// The triggers catch every write of the table (saves, cascades, inverse
/// relationships, batch operations), whatever code path made it. They are
/// temporary (the connection's own, never in the file or the cluster's log):
/// ``Store`` installs them before a write when the keys or the model changed.
enum ScopeCapture {
    /// The prefix of the capture tables and triggers.
    static let prefix = "depot_before_"

    /// Installs the capture of `keys` by entity (those of `schema`'s entities
    /// that it has as attributes or to-one relationships), replacing any other;
    /// returns what it installed: the keys captured by entity name, sorted.
    static func install(_ db: Database, schema: Schema, keys: [String: [String]]) throws -> [String: [String]] {
        try drop(db)
        var installed: [String: [String]] = [:]
        for (name, keys) in keys.sorted(by: { $0.key < $1.key }) {
            guard let entity = schema.entity(named: name) else { continue }
            let captured = keys.filter { entity.attributes[$0] != nil || entity.toOne[$0] != nil }.sorted()
            installed[name] = captured
            let columns = captured.map(entity.column)
            let table = EntitySchema.quote(prefix + entity.tableName)
            let list = (["id", "_version"] + columns).joined(separator: ", ")
            let old = (["id", "_version"] + columns).map { "OLD." + $0 }.joined(separator: ", ")
            try db.execute(
                sql:
                    "CREATE TEMP TABLE \(table) (id INTEGER PRIMARY KEY, _version INTEGER\(columns.map { ", " + $0 }.joined()))"
            )
            for (suffix, event) in [("_u", "UPDATE"), ("_d", "DELETE")] {
                try db.execute(
                    sql: """
                        CREATE TEMP TRIGGER \(EntitySchema.quote(prefix + entity.tableName + suffix)) BEFORE \(event) ON main.\(entity.table)
                        BEGIN INSERT OR IGNORE INTO \(table) (\(list)) VALUES (\(old)); END
                        """)
            }
        }
        return installed
    }

    /// Removes every capture table and trigger (before a model migration, which may drop columns they read).
    static func drop(_ db: Database) throws {
        for (name, type) in try installedObjects(db) {
            try db.execute(
                sql: "DROP \(type == "trigger" ? "TRIGGER" : "TABLE") IF EXISTS temp.\(EntitySchema.quote(name))")
        }
    }

    /// Empties the capture tables of `captured`'s entities (as ``install(_:schema:keys:)``
    /// returned them): what a replica applied, or a write that recorded nothing, left there.
    static func clear(_ db: Database, schema: Schema, captured: [String: [String]]) throws {
        for name in captured.keys {
            guard let entity = schema.entity(named: name) else { continue }
            try db.executeCached(sql: "DELETE FROM temp.\(EntitySchema.quote(prefix + entity.tableName))")
        }
    }

    private static func installedObjects(_ db: Database) throws -> [(String, String)] {
        try Row.fetchAll(
            db,
            sql:
                "SELECT name, type FROM sqlite_temp_master WHERE type IN ('table', 'trigger') AND name LIKE 'depot\\_before\\_%' ESCAPE '\\' ORDER BY type DESC"
        ).map { ($0[0], $0[1]) }
    }

    /// The recorded values of `changes`' rows of the `captured` entities: before
    /// from the capture tables (a row updated without a column of its table
    /// changing, as by a to-many inverse, has the same values before and after),
    /// after from the tables now. Empties the capture tables.
    static func values(
        _ db: Database, schema: Schema, changes: [String: EntityChangeSet], captured: [String: [String]]
    ) throws -> [String: RecordedValues] {
        var result: [String: RecordedValues] = [:]
        for (name, keys) in captured {
            guard let entity = schema.entity(named: name), let set = changes[name] else { continue }
            let shape = try ObjectShape(entity: entity, properties: keys)
            func read(_ rows: [Int64], from table: String) throws -> [Int64: [JSONValue]] {
                guard !rows.isEmpty else { return [:] }
                let sql =
                    "SELECT \(shape.selectList(schema: schema)) FROM \(table) AS t0 WHERE t0.id IN (SELECT value FROM json_each(?))"
                var found: [Int64: [JSONValue]] = [:]
                for row in try Row.fetchAll(db.cachedStatement(sql: sql), arguments: [Store.jsonArray(rows)]) {
                    guard case .object(let object) = shape.object(from: row) else { continue }
                    found[row[0]] = shape.keys.map { object[$0] ?? .null }
                }
                return found
            }
            let updated = set.updated.map(\.row)
            let after = try read(set.inserted + updated, from: "main.\(entity.table)")
            let before = try read(
                updated + set.deleted, from: "temp.\(EntitySchema.quote(prefix + entity.tableName))")
            var rows: [Int64: RecordedValues.Change] = [:]
            for row in set.inserted { rows[row] = .init(before: nil, after: after[row]) }
            for row in updated { rows[row] = .init(before: before[row] ?? after[row], after: after[row]) }
            // A delete without its old values (no capture then) is left out: history says it cannot be judged.
            for row in set.deleted { if let old = before[row] { rows[row] = .init(before: old, after: nil) } }
            result[name] = RecordedValues(keys: shape.keys, rows: rows)
        }
        try clear(db, schema: schema, captured: captured)
        return result
    }
}
