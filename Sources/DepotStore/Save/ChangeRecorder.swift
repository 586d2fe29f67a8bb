import DepotProtocol
import GRDB

/// What one committed transaction changed: the input of `store/didSave`,
/// history, and the fetched-results engine.
public struct CommittedTransaction: Sendable {
    /// The transaction's number.
    public var number: Int64
    /// Who made it.
    public var author: String?
    /// When it committed, seconds since 1970.
    public var timestamp: Double
    /// The changes, by entity name.
    public var changes: [String: EntityChangeSet]
    /// The values right after the transaction of its changed rows, by entity, for the entities the
    /// store was asked to capture (``Store/captureRowImages(of:)``): an entity absent here was not
    /// captured; a changed row absent from its entity's images no longer exists (deleted).
    public var images: [String: [Int64: EvaluationRow]] = [:]

    /// The wire form of the changes.
    public var wireChanges: [String: EntityChanges] { changes.mapValues { $0.wire } }
}

/// The rows of one entity that a transaction inserted, updated or deleted.
public struct EntityChangeSet: Sendable {
    /// The entity.
    public var entity: String
    /// Inserted rows, in order.
    public var inserted: [Int64] = []
    /// Updated rows with their changed keys, in order of first change.
    public var updated: [(row: Int64, keys: Set<String>)] = []
    /// Deleted rows, in order.
    public var deleted: [Int64] = []
    /// The values before and after of the keys row-level scopes read, when the
    /// daemon records them for this entity (``ScopeCapture``); `nil` otherwise.
    public var recorded: RecordedValues? = nil

    /// The wire form.
    public var wire: EntityChanges {
        EntityChanges(
            inserted: inserted.map { "\(entity)/\($0)" },
            updated: updated.map { EntityChanges.Update(id: "\(entity)/\($0.row)", keys: $0.keys.sorted()) },
            deleted: deleted.map { "\(entity)/\($0)" })
    }

    /// Every row the transaction touched.
    public var allRows: [Int64] { inserted + updated.map(\.row) + deleted }
}

/// Collects changes while a write runs, folding repeats: an update of a row
/// inserted or deleted in the same transaction is not reported as an update.
struct ChangeRecorder {
    private var inserted: [String: [Int64]] = [:]
    private var insertedSet: [String: Set<Int64>] = [:]
    private var updatedOrder: [String: [Int64]] = [:]
    private var updatedKeys: [String: [Int64: Set<String>]] = [:]
    private var deleted: [String: [Int64]] = [:]
    private var deletedSet: [String: Set<Int64>] = [:]

    mutating func insert(_ entity: String, _ row: Int64) {
        inserted[entity, default: []].append(row)
        insertedSet[entity, default: []].insert(row)
    }

    /// Records `rows` as inserted, in order (a batch's inserts, at once).
    mutating func insert(_ entity: String, rows: [Int64]) {
        guard !rows.isEmpty else { return }
        inserted[entity, default: []].append(contentsOf: rows)
        insertedSet[entity, default: []].formUnion(rows)
    }

    mutating func update(_ entity: String, _ row: Int64, key: String) {
        if updatedKeys[entity]?[row] == nil { updatedOrder[entity, default: []].append(row) }
        updatedKeys[entity, default: [:]][row, default: []].insert(key)
    }

    mutating func delete(_ entity: String, _ row: Int64) {
        guard deletedSet[entity, default: []].insert(row).inserted else { return }
        deleted[entity, default: []].append(row)
    }

    func isDeleted(_ entity: String, _ row: Int64) -> Bool { deletedSet[entity]?.contains(row) ?? false }

    private func isInserted(_ entity: String, _ row: Int64) -> Bool { insertedSet[entity]?.contains(row) ?? false }

    /// Rows updated and neither inserted nor deleted: the ones whose version grows.
    var updatedRows: [ObjectID] {
        updatedOrder.flatMap { entity, rows in
            rows.filter { !isInserted(entity, $0) && !isDeleted(entity, $0) }.map { ObjectID(entity: entity, row: $0) }
        }
    }

    var isEmpty: Bool { inserted.isEmpty && updatedRows.isEmpty && deleted.isEmpty }

    func changes() -> [String: EntityChangeSet] {
        var result: [String: EntityChangeSet] = [:]
        for (entity, rows) in inserted {
            result[entity, default: EntityChangeSet(entity: entity)].inserted = rows.filter { !isDeleted(entity, $0) }
        }
        for id in updatedRows {
            result[id.entity, default: EntityChangeSet(entity: id.entity)].updated.append(
                (id.row, updatedKeys[id.entity]?[id.row] ?? []))
        }
        for (entity, rows) in deleted {
            result[entity, default: EntityChangeSet(entity: entity)].deleted = rows.filter { !isInserted(entity, $0) }
        }
        return result.filter { !($0.value.inserted.isEmpty && $0.value.updated.isEmpty && $0.value.deleted.isEmpty) }
    }

    /// Bumps the version of every updated row, records the transaction in
    /// history and returns it, with the new versions of updated rows; `nil`
    /// when nothing changed.
    func commit(
        _ db: Database, schema: Schema, statements: SaveStatements, author: String?, retention: HistoryRetention,
        captured: [String: [String]] = [:]
    ) throws -> (
        CommittedTransaction, [String: Int64]
    )? {
        var versions: [String: Int64] = [:]
        for id in updatedRows {
            guard let entity = schema.entity(named: id.entity) else { continue }
            versions[id.description] = try Int64.fetchOne(
                statements.statement(db, entity, .bumpVersion, version: schema.version), arguments: [id.row])
        }
        guard !isEmpty else { return nil }
        return (
            try HistoryLog.record(
                db, schema: schema, author: author, changes: changes(), retention: retention, captured: captured),
            versions
        )
    }
}
