import GRDB

/// The save's prepared statements, by entity and shape.
///
/// A save of a shape met before (an insert that sets the same columns of the
/// same entity, an update of the same columns, a delete) builds no SQL text and
/// prepares nothing: it looks the statement up by entity and ``Shape``, binds
/// and steps. The SQL is written once per shape, in ``sql(for:of:)``.
///
/// The statements belong to the writer's connection, and the cache is used only
/// inside the store's writes, which the pool runs one at a time: hence
/// `@unchecked Sendable`. It empties itself when the model's version changes (a
/// migration adds, drops and renames the columns the SQL names) and when it is
/// handed another connection.
final class SaveStatements: @unchecked Sendable {
    /// What a statement does to an entity's table; with the entity, it determines the SQL.
    enum Shape: Hashable {
        /// `SELECT 1 FROM t WHERE id = ?`.
        case exists
        /// `SELECT * FROM t WHERE id = ?`.
        case storedRow
        /// `INSERT INTO t (_version, c…) VALUES (1, ?…)`, the columns by their index in `columnKeys`.
        case insert([Int])
        /// `UPDATE t SET c = ?, … WHERE id = ?`, the columns by their index in `columnKeys`, in order.
        case update([Int])
        /// `UPDATE t SET _version = _version + 1 WHERE id = ? RETURNING _version`.
        case bumpVersion
        /// `DELETE FROM t WHERE id = ?`.
        case delete
        /// `SELECT c FROM t WHERE id = ?` for the column of a key.
        case column(String)
        /// `UPDATE t SET c = ? WHERE id = ?` for the column of a key.
        case setColumn(String)
        /// `SELECT id FROM t WHERE c = ? ORDER BY id`: the rows whose column of a key holds a row.
        case referencing(String)
        /// `SELECT id FROM t WHERE c1 = ? AND …` for the entity's uniqueness constraint at an index;
        /// `excludingRow` adds `AND id <> ?`.
        case matching(constraint: Int, excludingRow: Bool)
        /// `SELECT member FROM j WHERE owner = ? ORDER BY member` in the join table of a many-to-many relationship.
        case members(String)
        /// `DELETE FROM j WHERE owner = ?`.
        case deleteOwnerPairs(String)
        /// `DELETE FROM j WHERE owner = ? AND member = ?`.
        case deletePair(String)
        /// `INSERT INTO j (owner, member) VALUES (?, ?)`.
        case insertPair(String)
    }

    private struct Key: Hashable {
        let entity: String
        let shape: Shape
    }

    private var statements: [Key: Statement] = [:]
    private var schemaVersion: Int64?
    private var connection: ObjectIdentifier?

    /// Creates an empty cache.
    init() {}

    /// How many statements are prepared (tests).
    var count: Int { statements.count }

    /// The statement of `shape` on `entity`'s table, prepared on `db` at its first use under model `version`.
    func statement(_ db: Database, _ entity: EntitySchema, _ shape: Shape, version: Int64) throws -> Statement {
        let owner = ObjectIdentifier(db)
        if version != schemaVersion || owner != connection {
            statements.removeAll()
            schemaVersion = version
            connection = owner
        }
        let key = Key(entity: entity.name, shape: shape)
        if let statement = statements[key] { return statement }
        let statement = try db.makeStatement(sql: try Self.sql(for: shape, of: entity))
        statements[key] = statement
        return statement
    }

    /// The SQL of `shape` on `entity`'s table.
    static func sql(for shape: Shape, of entity: EntitySchema) throws -> String {
        let table = entity.table
        switch shape {
        case .exists:
            return "SELECT 1 FROM \(table) WHERE id = ?"
        case .storedRow:
            return "SELECT * FROM \(table) WHERE id = ?"
        case .insert(let columns):
            let names = columns.map { ", " + entity.column(entity.columnKeys[$0]) }.joined()
            let placeholders = String(repeating: ", ?", count: columns.count)
            return "INSERT INTO \(table) (_version\(names)) VALUES (1\(placeholders))"
        case .update(let columns):
            let assignments = columns.map { entity.column(entity.columnKeys[$0]) + " = ?" }.joined(separator: ", ")
            return "UPDATE \(table) SET \(assignments) WHERE id = ?"
        case .bumpVersion:
            return "UPDATE \(table) SET _version = _version + 1 WHERE id = ? RETURNING _version"
        case .delete:
            return "DELETE FROM \(table) WHERE id = ?"
        case .column(let key):
            return "SELECT \(entity.column(key)) FROM \(table) WHERE id = ?"
        case .setColumn(let key):
            return "UPDATE \(table) SET \(entity.column(key)) = ? WHERE id = ?"
        case .referencing(let key):
            return "SELECT id FROM \(table) WHERE \(entity.column(key)) = ? ORDER BY id"
        case .matching(let index, let excludingRow):
            let constraint = entity.description.uniquenessConstraints[index]
            let condition = constraint.map { "\(entity.column($0)) = ?" }.joined(separator: " AND ")
            return "SELECT id FROM \(table) WHERE \(condition)\(excludingRow ? " AND id <> ?" : "")"
        case .members(let relationship):
            let join = try joinTable(relationship, of: entity)
            return
                "SELECT \(join.memberColumn) FROM \(join.table) WHERE \(join.ownerColumn) = ? ORDER BY \(join.memberColumn)"
        case .deleteOwnerPairs(let relationship):
            let join = try joinTable(relationship, of: entity)
            return "DELETE FROM \(join.table) WHERE \(join.ownerColumn) = ?"
        case .deletePair(let relationship):
            let join = try joinTable(relationship, of: entity)
            return "DELETE FROM \(join.table) WHERE \(join.ownerColumn) = ? AND \(join.memberColumn) = ?"
        case .insertPair(let relationship):
            let join = try joinTable(relationship, of: entity)
            return "INSERT INTO \(join.table) (\(join.ownerColumn), \(join.memberColumn)) VALUES (?, ?)"
        }
    }

    private static func joinTable(_ relationship: String, of entity: EntitySchema) throws -> JoinTable {
        guard let join = entity.joins[relationship] else {
            throw DatabaseError(message: "\(entity.name).\(relationship) is not a many-to-many relationship")
        }
        return join
    }
}
