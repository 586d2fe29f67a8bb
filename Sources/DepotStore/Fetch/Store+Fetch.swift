import DepotProtocol
import GRDB
import GRDBSQLite

extension Store {
    /// The default number of rows read between cancellation checks and partial results.
    public static let defaultBatchSize = 1000

    /// `store/fetch` without streaming: the whole result as values (for callers
    /// inside the daemon; the wire path is ``fetchEncoded(_:scope:cancellation:total:onBatch:)``), of
    /// the rows `scope` lets the caller read.
    public func fetch(_ request: DepotProtocol.FetchRequest, scope: ReadScope, cancellation: Cancellation? = nil)
        throws(RPCError) -> StoreFetch.Result
    {
        var elements: [JSONValue] = []
        var graph: PrefetchedGraph?
        let (count, transaction) = try fetchEncoded(
            request, scope: scope, cancellation: cancellation, related: { graph = $0 }
        ) {
            (batch) throws(RPCError) in
            guard batch.count > 0 else { return }
            do {
                elements +=
                    try JSONParser.parse([UInt8(ascii: "[")] + batch.json + [UInt8(ascii: "]")]).arrayValue ?? []
            } catch {
                throw .internalError("could not read back an encoded batch: \(error)")
            }
        }
        var related: [String: JSONValue]?
        if let graph {
            do {
                related = try JSONParser.parse(graph.relatedObject).objectValue
            } catch {
                throw .internalError("could not read back the encoded related objects: \(error)")
            }
        }
        switch request.resultType ?? .objects {
        case .count: return StoreFetch.Result(count: count, transaction: transaction)
        case .ids:
            return StoreFetch.Result(
                ids: elements.compactMap(\.stringValue), transaction: transaction, related: related)
        case .objects, .dictionaries:
            return StoreFetch.Result(objects: elements, transaction: transaction, related: related)
        }
    }

    /// `store/count`: the number of matches in `scope`, or of groups for a grouped request.
    public func count(_ request: DepotProtocol.FetchRequest, scope: ReadScope) throws(RPCError) -> Int {
        if request.isGrouped {
            // Checked as it is (a resultType of objects is refused), then counted through
            // fetchEncoded: one reading of a grouped request, and its errors.
            _ = try GroupedFetchPlan(request, scope: scope, schema: schema)
            var grouped = request
            grouped.resultType = .count
            grouped.countFirst = nil
            return try fetchEncoded(grouped, scope: scope) { _ in }.count
        }
        let plan = try FetchPlan(request, scope: scope, schema: schema)
        return try read { db in try Int.fetchOne(db, sql: plan.countSQL, arguments: plan.arguments) ?? 0 }
    }

    /// `store/get`: objects by id, `null` for ids that do not exist and for objects outside `scope`
    /// (which do not exist for the caller).
    public func objects(ids: [String], properties: [String]? = nil, scope: ReadScope) throws(RPCError) -> [JSONValue] {
        let schema = schema.visible(to: scope)
        var parsed: [(ObjectID, ObjectShape)] = []
        for (index, text) in ids.enumerated() {
            guard let id = ObjectID(text) else {
                throw .invalidParams("'\(text)' is not an object id (Entity/number)", field: "ids[\(index)]")
            }
            let entity = try schema.entity(id.entity, field: "ids[\(index)]")
            parsed.append((id, try ObjectShape(entity: entity, properties: properties)))
        }
        let hidden = try hiddenObjects(among: parsed.map(\.0), scope: scope)
        return try read { db in
            try parsed.map { id, shape in
                guard !hidden.contains(id) else { return .null }
                return try Self.readObject(db, id: id, shape: shape, schema: schema) ?? .null
            }
        }
    }

    /// Which of `ids` are outside `scope`: one read per scoped entity among them.
    private func hiddenObjects(among ids: [ObjectID], scope: ReadScope) throws(RPCError) -> Set<ObjectID> {
        var scoped: [String: [ObjectID]] = [:]
        for id in ids where scope.predicate(for: id.entity) != nil { scoped[id.entity, default: []].append(id) }
        var hidden: Set<ObjectID> = []
        for (entity, members) in scoped {
            let named = PredicateNode.comparison(
                Comparison(
                    lhs: .keyPath(["SELF"]), op: .in, rhs: .list(members.map { .value(.string($0.description)) })))
            let request = DepotProtocol.FetchRequest(entity: entity, resultType: .ids)
            let visible = Set(try fetch(request, scope: scope.narrowed(entity, to: named)).ids ?? [])
            hidden.formUnion(members.filter { !visible.contains($0.description) })
        }
        return hidden
    }

    static func readObject(_ db: Database, id: ObjectID, shape: ObjectShape, schema: Schema) throws -> JSONValue? {
        let sql = "SELECT \(shape.selectList(schema: schema)) FROM \(shape.entity.table) AS t0 WHERE t0.id = ?"
        return try Row.fetchOne(db, sql: sql, arguments: [id.row]).map { shape.object(from: $0) }
    }
}

/// One batch of a fetch as JSON: the elements (objects, dictionaries or id
/// strings) separated by commas, without the surrounding brackets.
public struct EncodedBatch: Sendable {
    /// The elements' JSON.
    public var json: [UInt8]
    /// How many elements.
    public var count: Int
    /// How many rows were read so far, this batch included.
    public var completed: Int
}

extension Store {
    /// `store/fetch` encoded straight from rows to JSON, batch by batch: what the
    /// daemon sends, with no value tree per object. A grouped request's
    /// elements are its groups' dictionaries (``GroupedFetchPlan``).
    ///
    /// - Returns: the number of matches (or groups) and the transaction the snapshot saw.
    /// - Parameter scope: the rows the caller may read, joined to the predicate as a tree
    ///   (and, with `prefetch`, the related objects it may be answered).
    /// - Parameter related: with `prefetch`, gets the related objects of the
    ///   rows read, from the same snapshot, after the last batch.
    public func fetchEncoded(
        _ request: DepotProtocol.FetchRequest, scope: ReadScope, cancellation: Cancellation? = nil,
        total: ((Int) -> Void)? = nil,
        related: ((PrefetchedGraph) -> Void)? = nil, onBatch: (EncodedBatch) throws(RPCError) -> Void
    ) throws(RPCError) -> (count: Int, transaction: Int64) {
        let batchSize = max(1, request.batchSize ?? Self.defaultBatchSize)
        let resultType = request.resultType ?? .objects
        let statements: (rows: String, count: String, arguments: StatementArguments)
        // Objects and dictionaries are written from SQLite's columns directly; ids and groups from the row.
        let write: (Row, SQLiteStatement, inout JSONWriter) -> Void
        var prefetch: PrefetchPlan?
        if request.isGrouped {
            if request.prefetch != nil {
                throw .invalidParams(
                    "a grouped request returns groups, which have no relationships to prefetch",
                    field: "params.prefetch")
            }
            let plan = try GroupedFetchPlan(request, scope: scope, schema: schema)
            statements = (plan.rowsSQL, plan.countSQL, plan.arguments)
            write = { row, _, writer in plan.write(row, into: &writer) }
        } else {
            let plan = try FetchPlan(request, scope: scope, schema: schema)
            prefetch = resultType == .count ? nil : plan.prefetch
            statements = (resultType == .ids ? plan.idsSQL : plan.objectsSQL, plan.countSQL, plan.arguments)
            let entityName = plan.entity.name
            let shape = plan.shape
            switch resultType {
            case .ids: write = { row, _, writer in writer.write("\(entityName)/\(row[0] as Int64)") }
            case .dictionaries:
                write = { _, statement, writer in shape.write(columnsOf: statement, dictionary: true, into: &writer) }
            default: write = { _, statement, writer in shape.write(columnsOf: statement, into: &writer) }
            }
        }
        let schema = schema
        do {
            return try read { db in
                let transaction = try Self.latestTransaction(db)
                var rowIDs: [Int64] = []
                if request.countFirst == true || resultType == .count {
                    let count = try Int.fetchOne(db, sql: statements.count, arguments: statements.arguments) ?? 0
                    if request.countFirst == true { total?(count) }
                    if resultType == .count { return (count, transaction) }
                }
                let statement = try db.makeStatement(sql: statements.rows)
                let cursor = try Row.fetchCursor(statement, arguments: statements.arguments)
                var writer = JSONWriter(capacity: batchSize * 64)
                var inBatch = 0
                var completed = 0
                // Rows keep coming: a long streamed fetch is not a runaway query.
                let watchdog = watchdog(of: db)
                while let row = try cursor.next() {
                    watchdog?.progressed()
                    if inBatch > 0 { writer.writeRaw(",") }
                    if prefetch != nil { rowIDs.append(row[0]) }
                    write(row, statement.sqliteStatement, &writer)
                    inBatch += 1
                    completed += 1
                    if inBatch == batchSize {
                        try cancellation?.check()
                        try onBatch(EncodedBatch(json: writer.bytes, count: inBatch, completed: completed))
                        writer = JSONWriter(capacity: batchSize * 64)
                        inBatch = 0
                    }
                }
                try cancellation?.check()
                if inBatch > 0 || completed == 0 {
                    try onBatch(EncodedBatch(json: writer.bytes, count: inBatch, completed: completed))
                }
                if let prefetch {
                    related?(
                        try Self.prefetch(
                            db, plan: prefetch, rows: rowIDs, schema: schema,
                            scopes: scope.isUnrestricted ? nil : scope.rules,
                            reach: false))
                }
                return (completed, transaction)
            }
        } catch  where request.isGrouped && error.code == .internalError && error.message.contains("integer overflow") {
            // SQLite stops a SUM of integers beyond 64 bits: the request's fault, not the daemon's.
            throw GroupedShape.sumOverflow
        }
    }
}
