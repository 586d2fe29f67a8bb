import DepotProtocol
import GRDB

/// A matching object's id and sort-key values: what a fetched-results index holds.
public struct KeyedRow: Sendable {
    /// The object's row number.
    public var id: Int64
    /// Its sort-key values, one per sort descriptor.
    public var key: SortKey

    /// Creates a keyed row.
    public init(id: Int64, key: SortKey) {
        self.id = id
        self.key = key
    }
}

extension Store {
    /// Streams every match of `plan` (only the `first` ones, when given) as
    /// (id, sort key), in order, to `body`, after telling `expectedCount` how
    /// many there are (at most `first`); returns the transaction the read saw.
    /// Nothing but the caller's structure grows with the result's size.
    public func keyedRows(
        _ plan: FetchPlan, cancellation: Cancellation? = nil, first: Int? = nil, expectedCount: (Int) -> Void,
        _ body: (KeyedRow) -> Void
    ) throws(RPCError) -> Int64 {
        try read { db in
            let transaction = try Self.latestTransaction(db)
            // The first rows of an indexed order cost what they are, not what the table is: no count.
            expectedCount(try first ?? Int.fetchOne(db, sql: plan.countSQL, arguments: plan.arguments) ?? 0)
            let sql =
                "SELECT t0.id\(keyColumns(plan)) FROM \(plan.entity.table) AS t0 WHERE \(plan.condition.sql) ORDER BY \(plan.ordering)"
                + (first.map { " LIMIT \($0)" } ?? "")
            let cursor = try Row.fetchCursor(db, sql: sql, arguments: plan.arguments)
            var count = 0
            let watchdog = watchdog(of: db)
            while let row = try cursor.next() {
                watchdog?.progressed()
                body(Self.keyedRow(row, keyCount: plan.sortExpressions.count))
                count += 1
                if count % 10_000 == 0 { try cancellation?.check() }
            }
            return transaction
        }
    }

    /// The rows among `ids` that match `plan`, with their current sort keys (unordered).
    ///
    /// The fetched-results engine calls this with a transaction's changed rows
    /// only: it costs what the change costs, not what the result set costs.
    public func keyedRows(_ plan: FetchPlan, among ids: [Int64]) throws(RPCError) -> [Int64: SortKey] {
        guard !ids.isEmpty else { return [:] }
        return try read { db in
            // The condition numbers its parameters ?1…?n; the id list comes after them.
            let idsParameter = "?\(plan.condition.arguments.count + 1)"
            let sql =
                "SELECT t0.id\(keyColumns(plan)) FROM \(plan.entity.table) AS t0 WHERE t0.id IN (SELECT value FROM json_each(\(idsParameter))) AND (\(plan.condition.sql))"
            let arguments = plan.condition.arguments + [Self.jsonArray(ids).databaseValue]
            var result: [Int64: SortKey] = [:]
            for row in try Row.fetchAll(db, sql: sql, arguments: StatementArguments(arguments)) {
                let keyed = Self.keyedRow(row, keyCount: plan.sortExpressions.count)
                result[keyed.id] = keyed.key
            }
            return result
        }
    }

    /// The wire objects of `ids` in `shape`, by row (missing rows are left out).
    public func objects(rows ids: [Int64], shape: ObjectShape) throws(RPCError) -> [Int64: JSONValue] {
        guard !ids.isEmpty else { return [:] }
        return try read { db in try objects(rows: ids, shape: shape, in: db) }
    }

    /// Runs `body` inside one read snapshot: what it reads through the
    /// ``SnapshotReader`` is the state of exactly `reader.transaction`.
    ///
    /// The fetched-results engine pairs the ids it holds at a transaction with
    /// values of that same transaction this way (DESIGN.md §7: a consistent read).
    public func readSnapshot<T>(_ body: (SnapshotReader) throws -> T) throws(RPCError) -> T {
        try read { db in
            // The first statement fixes the snapshot; the number is the one it sees.
            try body(SnapshotReader(transaction: try Self.latestTransaction(db), db: db, store: self))
        }
    }

    /// ``objects(rows:shape:)`` inside a read the caller holds.
    func objects(rows ids: [Int64], shape: ObjectShape, in db: Database) throws -> [Int64: JSONValue] {
        guard !ids.isEmpty else { return [:] }
        let sql =
            "SELECT \(shape.selectList(schema: schema)) FROM \(shape.entity.table) AS t0 WHERE t0.id IN (SELECT value FROM json_each(?))"
        var result: [Int64: JSONValue] = [:]
        for row in try Row.fetchAll(db, sql: sql, arguments: [Self.jsonArray(ids)]) {
            result[row[0]] = shape.object(from: row)
        }
        return result
    }

    /// Rows of `entity` whose to-one key path `path` (relationship names) leads to one of `targets`.
    ///
    /// The engine uses it to find objects whose sort or section value goes
    /// through a relationship to an object that changed.
    public func rows(of entity: EntitySchema, reaching targets: [Int64], through path: [String]) throws(RPCError)
        -> [Int64]
    {
        guard !targets.isEmpty, !path.isEmpty else { return [] }
        let schema = schema
        var expression = "t0." + entity.column(path[0])
        var current = entity
        for (depth, name) in path.enumerated().dropFirst() {
            guard let relationship = current.toOne[path[depth - 1]],
                let next = schema.entity(named: relationship.destination)
            else { return [] }
            expression =
                "(SELECT x\(depth).\(next.column(name)) FROM \(next.table) AS x\(depth) WHERE x\(depth).id = \(expression))"
            current = next
        }
        let sql = "SELECT t0.id FROM \(entity.table) AS t0 WHERE \(expression) IN (SELECT value FROM json_each(?))"
        return try read { db in try Int64.fetchAll(db, sql: sql, arguments: [Self.jsonArray(targets)]) }
    }

    /// The owners (values of the `inverse` to-one column) of `rows` of `destination`.
    public func owners(of rows: [Int64], in destination: EntitySchema, through inverse: String) throws(RPCError)
        -> [Int64]
    {
        guard !rows.isEmpty else { return [] }
        let sql =
            "SELECT DISTINCT \(destination.column(inverse)) FROM \(destination.table) WHERE id IN (SELECT value FROM json_each(?)) AND \(destination.column(inverse)) IS NOT NULL"
        return try read { db in try Int64.fetchAll(db, sql: sql, arguments: [Self.jsonArray(rows)]) }
    }

    /// The rows of `entity` whose many-to-many `relationship` holds any of `members`.
    public func rows(of entity: EntitySchema, holding members: [Int64], through relationship: String)
        throws(RPCError) -> [Int64]
    {
        guard !members.isEmpty, let join = entity.joins[relationship] else { return [] }
        let sql =
            "SELECT DISTINCT \(join.ownerColumn) FROM \(join.table) WHERE \(join.memberColumn) IN (SELECT value FROM json_each(?))"
        return try read { db in try Int64.fetchAll(db, sql: sql, arguments: [Self.jsonArray(members)]) }
    }

    /// Every row of `entity` (the fallback when a change's reach cannot be narrowed).
    public func allRows(of entity: EntitySchema) throws(RPCError) -> [Int64] {
        try read { db in try Int64.fetchAll(db, sql: "SELECT id FROM \(entity.table)") }
    }

    /// The rows each entity changed in the transactions after `since`, from history;
    /// `nil` when history no longer reaches back that far (``changes(since:)``).
    public func changedRows(since: Int64) throws(RPCError) -> (
        rows: [String: Set<Int64>], keys: [String: [Int64: Set<String>]], latest: Int64
    )? {
        try changes(since: since).map { ($0.rows, $0.keys, $0.latest) }
    }

    /// What the transactions after `since` changed, from history, with what a resumed
    /// subscription needs to know of each row (DESIGN.md §7, Resuming); `nil` when history no
    /// longer reaches back that far (pruned, or a replica whose history begins later), a migration
    /// came since, or `since` is past the newest transaction.
    public func changes(since: Int64) throws(RPCError) -> ChangesSince? {
        try read { db in
            let latest = try Self.latestTransaction(db)
            guard since <= latest else { return nil }
            var changes = ChangesSince(latest: latest)
            guard latest > since else { return changes }
            let oldest = try Int64.fetchOne(db, sql: "SELECT MIN(id) FROM depot_transaction") ?? latest
            guard oldest <= since + 1 else { return nil }
            // A replica that joined from the cluster's snapshot has no history before it.
            let begins = try Int64.fetchOne(
                db, sql: "SELECT CAST(value AS INTEGER) FROM depot_meta WHERE key = 'historyBegins'")
            if let begins, since < begins { return nil }
            for entry in try HistoryLog.entries(db, since: since, limit: Int.max) {
                // A transaction that changed no object is a migration (`model/define`): the values it
                // changed are not in history, so nothing since it can be named (DESIGN.md §7).
                if entry.changes.isEmpty { return nil }
                for (entity, change) in entry.changes {
                    changes.rows[entity, default: []].formUnion(change.allRows)
                    for row in change.inserted where changes.deleted[entity]?.contains(row) != true {
                        changes.inserted[entity, default: []].insert(row)
                    }
                    changes.deleted[entity, default: []].formUnion(change.deleted)
                    for (row, keys) in change.updated {
                        changes.keys[entity, default: [:]][row, default: []].formUnion(keys)
                    }
                }
            }
            return changes
        }
    }

    private func keyColumns(_ plan: FetchPlan) -> String {
        plan.sortExpressions.map { ", " + $0.sql }.joined()
    }

    private static func keyedRow(_ row: Row, keyCount: Int) -> KeyedRow {
        var values: [SortValue] = []
        values.reserveCapacity(keyCount)
        for index in 0..<keyCount { values.append(SortValue(row[index + 1] as DatabaseValue)) }
        return KeyedRow(id: row[0], key: SortKey(values: values))
    }

    static func jsonArray(_ ids: [Int64]) -> String {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}

/// Reads of one snapshot, handed out by ``Store/readSnapshot(_:)``; valid only inside its closure.
public struct SnapshotReader {
    /// The newest transaction the snapshot contains.
    public let transaction: Int64
    fileprivate let db: Database
    fileprivate let store: Store

    /// The wire objects of `ids` in `shape` as of ``transaction``, by row (missing rows left out).
    public func objects(rows ids: [Int64], shape: ObjectShape) throws -> [Int64: JSONValue] {
        try store.objects(rows: ids, shape: shape, in: db)
    }

    func prefetchInSnapshot(_ plan: PrefetchPlan, rows: [Int64], scopes: [String: PredicateNode]?) throws
        -> PrefetchedGraph
    {
        try Store.prefetch(db, plan: plan, rows: rows, schema: store.schema, scopes: scopes, reach: false)
    }
}

/// A changed row as the fetched-results engine evaluates it in memory: the
/// wire object (for the predicate evaluator) and each key's stored value as
/// SQL sorts it.
public struct EvaluationRow: Sendable {
    /// The wire object, every attribute and to-one id included.
    public let object: [String: JSONValue]
    /// Each attribute and to-one key's stored value, ordered as `ORDER BY` orders it.
    public let sortValues: [String: SortValue]
}

extension Store {
    /// The rows among `ids` of `entity` that still exist, read once for every
    /// result set of the entity to evaluate in memory (one query per entity and
    /// transaction, not one per result set).
    public func evaluationRows(of entity: EntitySchema, ids: [Int64]) throws(RPCError) -> [Int64: EvaluationRow] {
        guard !ids.isEmpty else { return [:] }
        let shape = try ObjectShape(entity: entity, properties: nil)
        let schema = schema
        return try read { db in try Self.evaluationRows(db, shape: shape, schema: schema, ids: ids) }
    }

    /// The rows among `ids` of `shape`'s entity (whole objects) that exist in `db`, with their sort values.
    static func evaluationRows(_ db: Database, shape: ObjectShape, schema: Schema, ids: [Int64]) throws
        -> [Int64: EvaluationRow]
    {
        let sql =
            "SELECT \(shape.selectList(schema: schema)) FROM \(shape.entity.table) AS t0 WHERE t0.id IN (SELECT value FROM json_each(?))"
        var result: [Int64: EvaluationRow] = [:]
        for row in try Row.fetchAll(db.cachedStatement(sql: sql), arguments: [jsonArray(ids)]) {
            guard case .object(let object) = shape.object(from: row) else { continue }
            var sortValues: [String: SortValue] = [:]
            for (index, key) in shape.keys.enumerated() {
                sortValues[key] = SortValue(row[index + 2] as DatabaseValue)
            }
            result[row[0]] = EvaluationRow(object: object, sortValues: sortValues)
        }
        return result
    }
}

/// What history says the transactions after some transaction changed (``Store/changes(since:)``).
public struct ChangesSince: Sendable {
    /// Every row changed, by entity.
    public var rows: [String: Set<Int64>] = [:]
    /// The keys each updated row changed, by entity.
    public var keys: [String: [Int64: Set<String>]] = [:]
    /// The rows inserted since (they did not exist then), by entity.
    public var inserted: [String: Set<Int64>] = [:]
    /// The rows deleted since, by entity.
    public var deleted: [String: Set<Int64>] = [:]
    /// The newest transaction.
    public var latest: Int64
}
