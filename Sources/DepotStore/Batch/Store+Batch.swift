import DepotProtocol
import GRDB

extension Store {
    /// `store/batchInsert`: one transaction; find-or-create over uniqueness constraints by `onConflict`.
    ///
    /// - Parameters:
    ///   - cancellation: checked every 1,000 objects; a cancelled batch commits nothing (-32800).
    ///   - progress: told how many objects were processed, every 1,000 and at the end.
    ///   - writeScope: the requesting key's write scope: an object outside it is -32018 and nothing commits.
    public func batchInsert(
        _ params: BatchInsert.Parameters, cancellation: Cancellation? = nil, progress: ((Int) -> Void)? = nil,
        writeScope: WriteScope
    ) throws(RPCError) -> (BatchInsert.Result, CommittedTransaction?) {
        try reportingWrite { db in
            // Built in the write: a replica may have applied a model change at its start.
            var operation = try batchInsertOperation(
                params, cancellation: cancellation, progress: progress, writeScope: writeScope)
            return try operation.run(db, objects: params.objects)
        }
    }

    /// Checks and converts a batch's objects against the current model,
    /// without the store: what a batch can do before it holds the writer, so
    /// that a save queued behind it waits only for its inserts.
    public func prepareBatchInsert(_ params: BatchInsert.Parameters) throws(RPCError) -> PreparedBatchInsert {
        let schema = schema
        let entity = try schema.entity(params.entity, field: "params.entity")
        return PreparedBatchInsert(
            params: params, schemaVersion: schema.version,
            rows: BatchRows(
                entity: entity, objects: params.objects, typed: typedBatchInsert.load(ordering: .relaxed)))
    }

    /// `store/batchInsert` of a batch checked and converted beforehand (``prepareBatchInsert(_:)``):
    /// the same result and errors as ``batchInsert(_:cancellation:progress:writeScope:)``. If the model changed
    /// since, the objects are converted again, in the write.
    public func batchInsert(
        _ prepared: PreparedBatchInsert, cancellation: Cancellation? = nil, progress: ((Int) -> Void)? = nil,
        writeScope: WriteScope
    ) throws(RPCError) -> (BatchInsert.Result, CommittedTransaction?) {
        try reportingWrite { db in
            var operation = try batchInsertOperation(
                prepared.params, cancellation: cancellation, progress: progress, writeScope: writeScope)
            // Prepared without the key's scope: a key some relationships are withheld from converts again.
            guard operation.schema.version == prepared.schemaVersion, writeScope.hidden.isEmpty else {
                return try operation.run(db, objects: prepared.params.objects)
            }
            return try operation.run(db, converted: prepared.rows)
        }
    }

    /// A batch insert as `params` (its `objects` aside) asks for it.
    private func batchInsertOperation(
        _ params: BatchInsert.Parameters, cancellation: Cancellation?, progress: ((Int) -> Void)?,
        writeScope: WriteScope
    ) throws(RPCError) -> BatchInsertOperation {
        let schema = schema
        var operation = BatchInsertOperation(
            schema: schema, statements: saveStatements,
            entity: try schema.entity(params.entity, field: "params.entity"),
            onConflict: params.onConflict ?? .error, author: params.author,
            typed: typedBatchInsert.load(ordering: .relaxed), writeScope: writeScope)
        operation.cancellation = cancellation
        operation.progress = progress
        operation.retention = historyRetention
        operation.scopeCapture = scopeCapture
        return operation
    }

    /// `store/batchInsert` of a large request read one object at a time from
    /// its bytes, so that memory follows one object, not the batch.
    public func batchInsert(
        _ params: BatchInsert.StreamedParameters, cancellation: Cancellation? = nil,
        progress: ((Int) -> Void)? = nil, writeScope: WriteScope
    ) throws(RPCError) -> (BatchInsert.Result, CommittedTransaction?) {
        try reportingWrite { db in
            var operation = try batchInsertOperation(
                params.header, cancellation: cancellation, progress: progress, writeScope: writeScope)
            do {
                // The typed path reads each object straight from the bytes; what it leaves
                // (a problem to report) is parsed and takes the generic path.
                try params.forEachObject(reading: { index, reader in
                    try operation.add(reading: &reader, at: index, db)
                }) { index, value in
                    guard case .object(let object) = value else {
                        throw RPCError.invalidParams(
                            "params.objects[\(index)] must be an object, got \(value.excerpt())",
                            field: "params.objects[\(index)]")
                    }
                    try operation.add(object, at: index, db)
                }
            } catch let failure as JSONParser.Failure {
                // Found only now: the request was read lazily. Nothing was committed.
                throw RPCError(code: .parseError, message: "parse error in params.objects: \(failure)")
            }
            return try operation.finish(db)
        }
    }

    /// `store/batchUpdate`: sets `values` on every object matching the predicate, in one transaction.
    ///
    /// Runs as one save of all matching objects, so validation, uniqueness,
    /// relationship bookkeeping and versions are exactly a save's.
    ///
    /// With a `writeScope`, only objects in it (and in `readScope`) match, and
    /// each must still be in it after the update, or nothing commits (-32018).
    public func batchUpdate(
        _ params: BatchUpdate.Parameters, cancellation: Cancellation? = nil, total: ((Int) -> Void)? = nil,
        progress: ((Int) -> Void)? = nil, readScope: ReadScope, writeScope: WriteScope
    ) throws(RPCError) -> (BatchUpdate.Result, CommittedTransaction?) {
        guard !params.values.isEmpty else {
            throw .invalidParams("values must name at least one key to set", field: "params.values")
        }
        let ids = try matchingIDs(
            entity: params.entity, predicate: params.predicate, arguments: params.arguments,
            scope: Self.scopes(readScope.predicate(for: params.entity), writeScope.rules[params.entity]?.predicate))
        total?(ids.count)
        let save = StoreSave.Parameters(
            updated: ids.map { UpdatedObject(id: $0, values: params.values) }, mergePolicy: .objectTrump,
            author: params.author)
        let (result, transaction) = try runSave(
            save, cancellation: cancellation, progress: progress, writeScope: writeScope)
        return (
            BatchUpdate.Result(
                count: transaction?.changes[params.entity]?.updated.count ?? 0, transaction: result.transaction),
            transaction
        )
    }

    /// `store/batchDelete`: deletes every object matching the predicate, in one transaction; delete rules apply.
    ///
    /// With a `writeScope`, only objects in it (and in `readScope`) match; a
    /// cascade into an object outside it is -32018 and nothing commits.
    public func batchDelete(
        _ params: BatchDelete.Parameters, cancellation: Cancellation? = nil, total: ((Int) -> Void)? = nil,
        progress: ((Int) -> Void)? = nil, readScope: ReadScope, writeScope: WriteScope
    ) throws(RPCError) -> (BatchDelete.Result, CommittedTransaction?) {
        let ids = try matchingIDs(
            entity: params.entity, predicate: params.predicate, arguments: params.arguments,
            scope: Self.scopes(readScope.predicate(for: params.entity), writeScope.rules[params.entity]?.predicate))
        total?(ids.count)
        let save = StoreSave.Parameters(deleted: ids.map { DeletedObject(id: $0) }, author: params.author)
        let (result, transaction) = try runSave(
            save, cancellation: cancellation, progress: progress, writeScope: writeScope)
        return (
            BatchDelete.Result(
                count: transaction?.changes[params.entity]?.deleted.count ?? 0, transaction: result.transaction),
            transaction
        )
    }

    /// The read and write scopes as one tree, `nil` when neither restricts.
    private static func scopes(_ read: PredicateNode?, _ write: PredicateNode?) -> PredicateNode? {
        switch (read, write) {
        case (nil, nil): nil
        case (let one?, nil), (nil, let one?): one
        case (let read?, let write?): .and([read, write])
        }
    }

    private func matchingIDs(entity: String, predicate: String?, arguments: JSONValue?, scope: PredicateNode?)
        throws(RPCError) -> [String]
    {
        // A replica first applies what other daemons committed; one that commits between this
        // read and the write's lock can still add a match the batch misses (docs/cluster.md).
        try catchUpWithCluster()
        let request = DepotProtocol.FetchRequest(
            entity: entity, predicate: predicate, arguments: arguments, resultType: .ids)
        return try fetch(request, scope: ReadScope(rules: scope.map { [entity: $0] } ?? [:])).ids ?? []
    }

    private func runSave(
        _ params: StoreSave.Parameters, cancellation: Cancellation?, progress: ((Int) -> Void)?,
        writeScope: WriteScope
    ) throws(RPCError) -> (StoreSave.Result, CommittedTransaction?) {
        try reportingWrite { db in
            var operation = SaveOperation(
                schema: self.schema, statements: saveStatements, policy: params.mergePolicy ?? .error,
                author: params.author)
            operation.cancellation = cancellation
            operation.progress = progress
            operation.retention = historyRetention
            operation.scopeCapture = scopeCapture
            operation.writeScope = writeScope
            return try operation.run(db, params: params)
        }
    }
}

/// A `store/batchInsert` whose objects were checked and converted before it
/// reached the writer (``Store/prepareBatchInsert(_:)``).
public struct PreparedBatchInsert: Sendable {
    /// The request.
    public let params: BatchInsert.Parameters
    let schemaVersion: Int64
    let rows: BatchRows
}
