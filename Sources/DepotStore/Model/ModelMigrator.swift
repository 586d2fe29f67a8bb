import DepotProtocol
import Foundation
import GRDB

/// Defines the model and migrates the tables in place (DESIGN.md §4).
///
/// A lightweight migration adds entities, optional or defaulted attributes,
/// relationships and indexes, and renames what names `renamedFrom`. Anything
/// else (removing, retyping, making optional values required) is refused with
/// -32016 and nothing changes: the whole definition runs in one transaction.
enum ModelMigrator {
    /// Reads the stored model.
    static func loadSchema(_ db: Database) throws -> Schema {
        guard let text = try String.fetchOne(db, sql: "SELECT value FROM depot_meta WHERE key = 'model'") else {
            return .empty
        }
        let version =
            try Int64.fetchOne(db, sql: "SELECT CAST(value AS INTEGER) FROM depot_meta WHERE key = 'modelVersion'") ?? 1
        let entities = try JSONDecoder().decode([EntityDescription].self, from: Data(text.utf8))
        return Schema(version: version, entities: entities.map(EntitySchema.init))
    }

    /// Defines or migrates the entities of `named` inside the caller's
    /// transaction, leaving the model's other entities as they are (DESIGN.md §4):
    /// separate processes can each bring their own entities. All of it applies, or none.
    ///
    /// - Parameter removing: entities the caller asked to remove explicitly;
    ///   removal is not a lightweight migration, so any name here is refused.
    static func migrate(
        _ db: Database, from old: Schema, to named: [EntityDescription], removing: [String] = []
    ) throws -> (Schema, [String]) {
        // History's capture triggers read columns a migration may drop or rename: the store
        // installs them again before its next write (``Store/prepareScopeCapture()``).
        try ScopeCapture.drop(db)
        for (index, name) in removing.enumerated() {
            guard old.entity(named: name) != nil else {
                let known = old.entities.map(\.name).joined(separator: ", ")
                throw RPCError.invalidParams(
                    "cannot remove unknown entity '\(name)' (the model has: \(known.isEmpty ? "no entities" : known))",
                    field: "remove[\(index)]")
            }
            throw refused("removing entity \(name)")
        }
        let (merged, fields) = try compose(old, with: named)
        // A key left out of a named entity would be a removal: refuse it before anything else.
        for entity in named {
            guard let previous = old.entity(named: entity.renamedFrom ?? entity.name) ?? old.entity(named: entity.name)
            else { continue }
            if let key = removedKey(from: previous.description, in: entity) {
                throw refused("removing \(previous.name).\(key)")
            }
        }
        try ModelValidator.validate(merged, fields: fields)
        var changes: [String] = []
        for entity in merged where named.contains(where: { $0.name == entity.name }) {
            let previous = old.entity(named: entity.renamedFrom ?? entity.name) ?? old.entity(named: entity.name)
            guard let previous else {
                try createTable(db, for: EntitySchema(entity))
                changes.append("added entity \(entity.name)")
                continue
            }
            if previous.name != entity.name {
                try db.execute(sql: "ALTER TABLE \(previous.table) RENAME TO \(EntitySchema.quote("e_" + entity.name))")
                changes.append("renamed entity \(previous.name) to \(entity.name)")
            }
            try migrateColumns(db, from: previous.description, to: entity, changes: &changes)
        }
        let schema = Schema(version: old.version + (changes.isEmpty ? 0 : 1), entities: merged.map(EntitySchema.init))
        try migrateJoinTables(db, from: old, to: schema, named: named)
        for entity in schema.entities {
            try syncIndexes(db, for: entity, changes: &changes)
            try syncFoldTriggers(db, for: entity)
        }
        if changes.isEmpty && !old.entities.isEmpty { return (old, []) }
        let finalSchema = Schema(version: max(old.version + (changes.isEmpty ? 0 : 1), 1), entities: schema.entities)
        let json = try JSONEncoder().encode(merged)
        try db.execute(
            sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('model', ?)",
            arguments: [String(decoding: json, as: UTF8.self)])
        try db.execute(
            sql: "INSERT OR REPLACE INTO depot_meta (key, value) VALUES ('modelVersion', ?)",
            arguments: [String(finalSchema.version)])
        return (finalSchema, changes)
    }

    /// The whole model after defining `named`: the stored entities in their
    /// order, each named one replacing its previous version (by name or
    /// `renamedFrom`), new ones appended; relationships of the other entities
    /// follow a renamed destination. Returns the field prefix of each entity
    /// for error messages (`entities[i]` for the call's, `model.Name` for the others).
    private static func compose(_ old: Schema, with named: [EntityDescription]) throws(RPCError) -> (
        [EntityDescription], [String]
    ) {
        var merged = old.descriptions
        var fields = merged.map { "model.\($0.name)" }
        var renamed: [String: String] = [:]
        var seen = Set<String>()
        for (index, entity) in named.enumerated() {
            guard seen.insert(entity.name).inserted else {
                throw .invalidParams("entity '\(entity.name)' is defined twice", field: "entities[\(index)].name")
            }
            let previous =
                merged.firstIndex { $0.name == (entity.renamedFrom ?? entity.name) }
                ?? merged.firstIndex { $0.name == entity.name }
            if let previous {
                if merged[previous].name != entity.name { renamed[merged[previous].name] = entity.name }
                merged[previous] = entity
                fields[previous] = "entities[\(index)]"
            } else {
                merged.append(entity)
                fields.append("entities[\(index)]")
            }
        }
        // Relationships renamed by the call, so that stored inverses can follow: (entity, old name) -> new name.
        var renamedRelationships: [String: String] = [:]
        for entity in named {
            for relationship in entity.relationships {
                if let old = relationship.renamedFrom, old != relationship.name {
                    renamedRelationships["\(entity.name).\(old)"] = relationship.name
                }
            }
        }
        let namedNames = Set(named.map(\.name))
        for position in merged.indices where !namedNames.contains(merged[position].name) {
            for index in merged[position].relationships.indices {
                var relationship = merged[position].relationships[index]
                if let name = renamed[relationship.destination] { relationship.destination = name }
                if let inverse = relationship.inverse,
                    let name = renamedRelationships["\(relationship.destination).\(inverse)"]
                {
                    relationship.inverse = name
                }
                merged[position].relationships[index] = relationship
            }
        }
        return (merged, fields)
    }

    /// The first key of `old` that `new` leaves out (neither kept nor renamed), if any.
    private static func removedKey(from old: EntityDescription, in new: EntityDescription) -> String? {
        var kept = Set<String>()
        for attribute in new.attributes { kept.insert(attribute.renamedFrom ?? attribute.name) }
        for attribute in new.attributes where old.attribute(named: attribute.renamedFrom ?? attribute.name) == nil {
            kept.insert(attribute.name)
        }
        for relationship in new.relationships { kept.insert(relationship.renamedFrom ?? relationship.name) }
        for relationship in new.relationships
        where old.relationship(named: relationship.renamedFrom ?? relationship.name) == nil {
            kept.insert(relationship.name)
        }
        return (old.attributes.map(\.name) + old.relationships.map(\.name)).first { !kept.contains($0) }
    }

    private static func refused(_ what: String) -> RPCError {
        RPCError(
            code: .migrationRefused, message: "\(what) is not a lightweight migration; nothing was changed",
            data: ["change": .string(what)])
    }

    private static func createTable(_ db: Database, for entity: EntitySchema) throws {
        var columns = ["id INTEGER PRIMARY KEY AUTOINCREMENT", "_version INTEGER NOT NULL DEFAULT 1"]
        for key in entity.columnKeys {
            columns.append(entity.column(key) + (entity.toOne[key] != nil ? " INTEGER" : ""))
        }
        for attribute in entity.description.attributes where attribute.folded {
            columns.append(EntitySchema.quote(EntitySchema.foldedColumnName(attribute.name)) + " TEXT")
        }
        try db.execute(sql: "CREATE TABLE \(entity.table) (\(columns.joined(separator: ", ")))")
    }

    /// Creates the join table of every many-to-many relationship that is new,
    /// and moves the pairs of one whose entity or relationship was renamed.
    private static func migrateJoinTables(
        _ db: Database, from old: Schema, to new: Schema, named: [EntityDescription]
    ) throws {
        let renamedFrom = Dictionary(
            named.compactMap { entity in
                entity.renamedFrom.flatMap {
                    old.entity(named: $0) != nil && $0 != entity.name ? (entity.name, $0) : nil
                }
            }, uniquingKeysWith: { first, _ in first })
        for entity in new.entities {
            for (name, join) in entity.joins.sorted(by: { $0.key < $1.key }) where join.isFirstSide {
                let relationship = entity.toMany[name]!
                let oldEntity = old.entity(named: renamedFrom[entity.name] ?? entity.name)
                let oldName =
                    relationship.renamedFrom.flatMap { oldEntity?.toMany[$0] != nil ? $0 : nil } ?? relationship.name
                guard let previous = oldEntity?.joins[oldName] else {
                    try db.execute(
                        sql: """
                            CREATE TABLE \(join.table) (a INTEGER NOT NULL, b INTEGER NOT NULL, PRIMARY KEY (a, b)) WITHOUT ROWID;
                            CREATE INDEX \(EntitySchema.quote("r_" + join.name)) ON \(join.table) (b, a);
                            """)
                    continue
                }
                if previous.name == join.name && previous.isFirstSide { continue }
                // Renamed: copy the pairs into the new table, turned around when the other side now names it.
                let (a, b) = previous.isFirstSide ? ("a", "b") : ("b", "a")
                try db.execute(
                    sql: """
                        CREATE TABLE \(join.table) (a INTEGER NOT NULL, b INTEGER NOT NULL, PRIMARY KEY (a, b)) WITHOUT ROWID;
                        INSERT INTO \(join.table) (a, b) SELECT \(a), \(b) FROM \(previous.table);
                        DROP TABLE \(previous.table);
                        CREATE INDEX \(EntitySchema.quote("r_" + join.name)) ON \(join.table) (b, a);
                        """)
            }
        }
    }

    private static func migrateColumns(
        _ db: Database, from old: EntityDescription, to new: EntityDescription, changes: inout [String]
    ) throws {
        let table = EntitySchema.quote("e_" + new.name)
        var keptKeys = Set<String>()
        for attribute in new.attributes {
            let source =
                old.attribute(named: attribute.renamedFrom ?? attribute.name) ?? old.attribute(named: attribute.name)
            guard let source else {
                guard attribute.optional || attribute.defaultValue != nil else {
                    throw refused("adding required attribute \(new.name).\(attribute.name) without a default")
                }
                try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN \(EntitySchema.quote(attribute.name))")
                if let value = attribute.defaultValue, !value.isNull {
                    let stored = try ValueCoding.databaseValue(value, type: attribute.type)
                    try db.execute(
                        sql: "UPDATE \(table) SET \(EntitySchema.quote(attribute.name)) = ?", arguments: [stored])
                }
                if attribute.folded { try addFoldedColumn(db, table: table, attribute) }
                changes.append("added attribute \(new.name).\(attribute.name)")
                continue
            }
            keptKeys.insert(source.name)
            guard source.type == attribute.type else {
                throw refused(
                    "changing the type of \(new.name).\(attribute.name) from \(source.type.rawValue) to \(attribute.type.rawValue)"
                )
            }
            if source.optional && !attribute.optional && attribute.defaultValue == nil {
                throw refused("making optional attribute \(new.name).\(attribute.name) required")
            }
            if source.name != attribute.name {
                try db.execute(
                    sql:
                        "ALTER TABLE \(table) RENAME COLUMN \(EntitySchema.quote(source.name)) TO \(EntitySchema.quote(attribute.name))"
                )
                changes.append("renamed attribute \(new.name).\(source.name) to \(attribute.name)")
            }
            if source.folded != attribute.folded {
                if attribute.folded {
                    try addFoldedColumn(db, table: table, attribute)
                } else {
                    try dropFoldedColumn(db, table: table, tableName: "e_" + new.name, key: source.name)
                }
                changes.append("\(attribute.folded ? "folded" : "unfolded") attribute \(new.name).\(attribute.name)")
            } else if source.folded, source.name != attribute.name {
                // Its index and triggers are made again under the new name (syncIndexes, syncFoldTriggers).
                try db.execute(
                    sql:
                        "ALTER TABLE \(table) RENAME COLUMN \(EntitySchema.quote(EntitySchema.foldedColumnName(source.name))) TO \(EntitySchema.quote(EntitySchema.foldedColumnName(attribute.name)))"
                )
            }
        }
        for relationship in new.relationships {
            let source =
                old.relationship(named: relationship.renamedFrom ?? relationship.name)
                ?? old.relationship(named: relationship.name)
            guard let source else {
                if !relationship.toMany {
                    try db.execute(
                        sql: "ALTER TABLE \(table) ADD COLUMN \(EntitySchema.quote(relationship.name)) INTEGER")
                }
                changes.append("added relationship \(new.name).\(relationship.name)")
                continue
            }
            keptKeys.insert(source.name)
            guard source.destination == relationship.destination, source.toMany == relationship.toMany else {
                throw refused("changing the destination or cardinality of \(new.name).\(relationship.name)")
            }
            if source.name != relationship.name {
                if !relationship.toMany {
                    try db.execute(
                        sql:
                            "ALTER TABLE \(table) RENAME COLUMN \(EntitySchema.quote(source.name)) TO \(EntitySchema.quote(relationship.name))"
                    )
                }
                changes.append("renamed relationship \(new.name).\(source.name) to \(relationship.name)")
            }
            if source.deleteRule != relationship.deleteRule || source.inverse != relationship.inverse {
                changes.append("changed relationship \(new.name).\(relationship.name)")
            }
        }
        for key in old.attributes.map(\.name) + old.relationships.map(\.name) where !keptKeys.contains(key) {
            throw refused("removing \(old.name).\(key)")
        }
    }

    /// Adds `attribute`'s shadow column, filled from the rows as they are.
    private static func addFoldedColumn(_ db: Database, table: String, _ attribute: AttributeDescription) throws {
        let shadow = EntitySchema.quote(EntitySchema.foldedColumnName(attribute.name))
        try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN \(shadow) TEXT")
        try db.execute(sql: "UPDATE \(table) SET \(shadow) = \(EntitySchema.foldExpression(attribute.name))")
    }

    /// Drops the shadow column of `key` (once folded) with the index and triggers that name it
    /// (by whatever entity name they were made under).
    private static func dropFoldedColumn(_ db: Database, table: String, tableName: String, key: String) throws {
        let shadow = EntitySchema.quote(EntitySchema.foldedColumnName(key))
        let dependents = try Row.fetchAll(
            db,
            sql:
                "SELECT type, name FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') AND name GLOB 'f_*' AND instr(sql, ?) > 0",
            arguments: [tableName, shadow])
        for row in dependents {
            let type: String = row["type"]
            let name: String = row["name"]
            try db.execute(sql: "DROP \(type == "index" ? "INDEX" : "TRIGGER") \(EntitySchema.quote(name))")
        }
        try db.execute(sql: "ALTER TABLE \(table) DROP COLUMN \(shadow)")
    }

    /// The name of a trigger that keeps a shadow column right (`event`: `insert` or `update`).
    private static func foldedTriggerName(_ entity: String, _ key: String, _ event: String) -> String {
        "f_\(entity)_\(key)_\(event)"
    }

    /// Makes the triggers that keep the shadow columns right exactly those of the entity's
    /// `folded` attributes: after an insert, and after an update that sets the attribute, the
    /// row's shadow column is set to the fold. Being SQLite's, they run for every write path
    /// (saves, batches, a replica applying a changeset) without any of them knowing.
    private static func syncFoldTriggers(_ db: Database, for entity: EntitySchema) throws {
        var desired: [String: String] = [:]
        for attribute in entity.description.attributes where attribute.folded {
            let shadow = EntitySchema.quote(EntitySchema.foldedColumnName(attribute.name))
            let fold = EntitySchema.foldExpression(attribute.name, row: "NEW")
            let insert = foldedTriggerName(entity.name, attribute.name, "insert")
            desired[insert] =
                "CREATE TRIGGER \(EntitySchema.quote(insert)) AFTER INSERT ON \(entity.table) BEGIN UPDATE \(entity.table) SET \(shadow) = \(fold) WHERE id = NEW.id; END"
            let update = foldedTriggerName(entity.name, attribute.name, "update")
            desired[update] =
                "CREATE TRIGGER \(EntitySchema.quote(update)) AFTER UPDATE OF \(entity.column(attribute.name)) ON \(entity.table) BEGIN UPDATE \(entity.table) SET \(shadow) = \(fold) WHERE id = NEW.id; END"
        }
        let existing = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND name GLOB 'f_*'",
            arguments: [entity.tableName])
        var present: [String: String] = [:]
        for row in existing {
            if let name: String = row["name"], let sql: String = row["sql"] { present[name] = sql }
        }
        for (name, sql) in present where desired[name] != sql {
            try db.execute(sql: "DROP TRIGGER \(EntitySchema.quote(name))")
        }
        for (name, sql) in desired.sorted(by: { $0.key < $1.key }) where present[name] != sql {
            try db.execute(sql: sql)
        }
    }

    /// The name of the index on a folded attribute's shadow column.
    private static func foldedIndexName(_ entity: String, _ key: String) -> String { "f_\(entity)_\(key)" }

    /// Makes the entity's indexes exactly the declared ones, plus one per to-one relationship column.
    private static func syncIndexes(_ db: Database, for entity: EntitySchema, changes: inout [String]) throws {
        var desired: [String: String] = [:]
        func add(_ prefix: String, _ keys: [String], unique: Bool) {
            let name = "\(prefix)_\(entity.name)_\(keys.joined(separator: "_"))"
            let columns = keys.map(entity.column).joined(separator: ", ")
            desired[name] =
                "CREATE \(unique ? "UNIQUE " : "")INDEX \(EntitySchema.quote(name)) ON \(entity.table) (\(columns))"
        }
        for attribute in entity.description.attributes where attribute.indexed {
            add("i", [attribute.name], unique: false)
        }
        for keys in entity.description.indexes { add("i", keys, unique: false) }
        for attribute in entity.description.attributes where attribute.folded {
            let name = foldedIndexName(entity.name, attribute.name)
            desired[name] =
                "CREATE INDEX \(EntitySchema.quote(name)) ON \(entity.table) (\(entity.foldedColumn(attribute.name)!))"
        }
        for keys in entity.description.uniquenessConstraints { add("u", keys, unique: true) }
        for key in entity.toOne.keys { add("r", [key], unique: false) }
        let existing = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
            arguments: [entity.tableName])
        var present: [String: String] = [:]
        for row in existing {
            if let name: String = row["name"], let sql: String = row["sql"] { present[name] = sql }
        }
        for (name, sql) in present where desired[name] != sql {
            try db.execute(sql: "DROP INDEX \(EntitySchema.quote(name))")
            if !name.hasPrefix("r_"), !name.hasPrefix("f_") { changes.append("dropped index \(name)") }
        }
        for (name, sql) in desired.sorted(by: { $0.key < $1.key }) where present[name] != sql {
            do {
                try db.execute(sql: sql)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                throw refused("adding uniqueness constraint \(name) while existing objects share its values")
            }
            if !name.hasPrefix("r_"), !name.hasPrefix("f_") { changes.append("added index \(name)") }
        }
    }
}

extension Store {
    /// `model/define`: validates and applies the named entities in one
    /// transaction; the model's other entities stay as they are.
    ///
    /// - Parameter removing: entities the caller explicitly asks to remove (refused, -32016).
    public func defineModel(_ entities: [EntityDescription], removing: [String] = []) throws(RPCError)
        -> ModelDefine.Result
    {
        let migrate = { (db: Database) in
            try ModelMigrator.migrate(db, from: self.schema, to: entities, removing: removing)
        }
        // A migration that changed the model is a transaction (DESIGN.md §7, Across a migration):
        // numbered in history (with no object changes of its own) and published like a save. The
        // first definition of an empty store is not: nothing can follow a model before it exists.
        let (schema, changes): (Schema, [String])
        var committed: CommittedTransaction?
        if let replication {
            // Replicas migrate themselves from the log entry, not from a changeset; the entry carries
            // the migration's number, which each of them records as this one does.
            let change = ModelChange(entities: entities, removing: removing)
            ((schema, changes), committed) = try replicatedWrite(replication, model: change) { db in
                // Read per try: a try under the lock first applies what this replica missed.
                let migrating = !self.schema.entities.isEmpty
                change.transaction = nil
                let migrated = try migrate(db)
                change.changed = !migrated.1.isEmpty
                guard migrating, change.changed else { return (migrated, nil) }
                let transaction = try HistoryLog.recordMigration(
                    db, number: Self.latestTransaction(db) + 1, timestamp: Date.now.timeIntervalSince1970,
                    author: nil, retention: self.historyRetention)
                change.transaction = transaction.number
                self.commits.expect(transaction, in: db)
                return (migrated, transaction)
            }
        } else {
            let migrating = !self.schema.entities.isEmpty
            ((schema, changes), committed) = try reportingWrite { db in
                let migrated = try migrate(db)
                guard migrating, !migrated.1.isEmpty else { return (migrated, nil) }
                let transaction = try HistoryLog.record(
                    db, schema: migrated.0, author: nil, changes: [:], retention: self.historyRetention, captured: [:])
                return (migrated, transaction)
            }
        }
        // The migration dropped history's capture triggers, whether or not the model changed.
        scopeRecording.withLock { $0.installed = nil }
        replaceSchema(schema)
        return ModelDefine.Result(version: schema.version, changes: changes, transaction: committed?.number)
    }

    /// `model/get`.
    public func model() -> ModelGet.Result {
        let schema = schema
        return ModelGet.Result(version: schema.version, entities: schema.descriptions)
    }
}
