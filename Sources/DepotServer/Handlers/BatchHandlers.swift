import DepotProtocol
import DepotStore

extension DepotService {
    static func registerBatchHandlers(_ handlers: inout HandlerRegistry) {
        // The objects are checked and converted before the batch holds the writer: a save queued
        // behind a run of batches waits only for their inserts (issue: saves beside batches).
        handlers.registerPrepared(
            BatchInsert.self,
            prepare: { (params, context) throws(RPCError) in try context.store.prepareBatchInsert(params) },
            write: { (prepared, context) throws(RPCError) in
                try batchInsert(prepared.params, count: prepared.params.objects.count, context: context) {
                    progress throws(RPCError) in
                    try context.store.batchInsert(
                        prepared, cancellation: context.cancellation, progress: progress,
                        writeScope: writeScope(context))
                }
            },
            raw: { (raw, context) throws(RPCError) in
                // A large request: the objects are read one at a time from the message's bytes.
                let params = try BatchInsert.StreamedParameters(bytes: raw.bytes, range: raw.range)
                return try batchInsert(params.header, count: params.count, context: context) {
                    progress throws(RPCError) in
                    try context.store.batchInsert(
                        params, cancellation: context.cancellation, progress: progress,
                        writeScope: writeScope(context))
                }
            })
        handlers.register(BatchUpdate.self, .write) { (params, context) throws(RPCError) in
            let scope = try batchScope(params.entity, params.predicate, params.arguments, context: context)
            let progress = context.progress(token: params.workDoneToken)
            progress?.begin(title: "Updating \(params.entity)", total: nil)
            return try reportingProgress(progress) { (progressCallback) throws(RPCError) in
                let (result, _) = try context.store.batchUpdate(
                    params, cancellation: context.cancellation, total: { progress?.setTotal(Int64($0)) },
                    progress: progressCallback, readScope: scope.read, writeScope: scope.write)
                return (result, Int64(result.count))
            }
        }
        handlers.register(BatchDelete.self, .write) { (params, context) throws(RPCError) in
            let scope = try batchScope(params.entity, params.predicate, params.arguments, context: context)
            let progress = context.progress(token: params.workDoneToken)
            progress?.begin(title: "Deleting \(params.entity)", total: nil)
            return try reportingProgress(progress) { (progressCallback) throws(RPCError) in
                let (result, _) = try context.store.batchDelete(
                    params, cancellation: context.cancellation, total: { progress?.setTotal(Int64($0)) },
                    progress: progressCallback, readScope: scope.read, writeScope: scope.write)
                return (result, Int64(result.count))
            }
        }
    }

    /// A batch update or delete's scopes: the key's read scope of `entity` and
    /// its write scope, after refusing predicate key paths into scoped entities.
    private static func batchScope(
        _ entity: String, _ predicate: String?, _ arguments: JSONValue?, context: RequestContext
    ) throws(RPCError) -> (read: PredicateNode?, write: WriteScope?) {
        guard let scopeGuard = context.scopeGuard, let key = context.key else { return (nil, nil) }
        let request = try scopeGuard.read(
            FetchRequest(entity: entity, predicate: predicate, arguments: arguments), field: "params")
        return (request.scope, key.scope?.writeScope(keyName: key.name))
    }

    /// The requesting key's write scope, `nil` when it has none.
    private static func writeScope(_ context: RequestContext) -> WriteScope? {
        context.key.flatMap { key in key.scope?.writeScope(keyName: key.name) }
    }

    /// Runs a batch insert of `count` objects with progress.
    private static func batchInsert(
        _ params: BatchInsert.Parameters, count: Int, context: RequestContext,
        _ body: (((Int) -> Void)?) throws(RPCError) -> (BatchInsert.Result, CommittedTransaction?)
    ) throws(RPCError) -> BatchInsert.Result {
        let progress = context.progress(token: params.workDoneToken)
        progress?.begin(title: "Inserting \(count) \(params.entity)", total: Int64(count))
        return try reportingProgress(progress) { (progressCallback) throws(RPCError) in
            let (result, _) = try body(progressCallback)
            return (result, Int64(result.inserted + result.updated + result.ignored))
        }
    }

    /// Runs a batch body with throttled reports, and always ends the progress:
    /// `cancelled: true` when the request was cancelled.
    private static func reportingProgress<R>(
        _ progress: ProgressReporter?, _ body: (((Int) -> Void)?) throws(RPCError) -> (R, Int64)
    ) throws(RPCError) -> R {
        var completed: Int64 = 0
        do {
            let (result, done) = try body(
                progress.map { reporter in
                    { count in
                        completed = Int64(count)
                        reporter.report(completed: completed)
                    }
                })
            progress?.end(completed: done, cancelled: false)
            return result
        } catch {
            progress?.end(completed: completed, cancelled: error.code == .requestCancelled)
            throw error
        }
    }
}
