import DepotProtocol
import DepotStore

extension DepotService {
    static func registerBatchHandlers(_ handlers: inout HandlerRegistry) {
        // The objects are checked and converted before the batch holds the writer: a save queued
        // behind a run of batches waits only for their inserts (issue: saves beside batches).
        handlers.registerPrepared(
            BatchInsert.self, .scoped,
            prepare: { (params, context) throws(RPCError) in try context.view.prepareBatchInsert(params) },
            write: { (prepared, context) throws(RPCError) in
                try batchInsert(prepared.params, count: prepared.params.objects.count, context: context) {
                    progress throws(RPCError) in
                    try context.view.batchInsert(prepared, cancellation: context.cancellation, progress: progress)
                }
            },
            raw: { (raw, context) throws(RPCError) in
                // A large request: the objects are read one at a time from the message's bytes.
                let params = try BatchInsert.StreamedParameters(bytes: raw.bytes, range: raw.range)
                return try batchInsert(params.header, count: params.count, context: context) {
                    progress throws(RPCError) in
                    try context.view.batchInsert(params, cancellation: context.cancellation, progress: progress)
                }
            })
        handlers.register(BatchUpdate.self, .write, .scoped) { (params, context) throws(RPCError) in
            let progress = context.progress(token: params.workDoneToken)
            progress?.begin(title: "Updating \(params.entity)", total: nil)
            return try reportingProgress(progress) { (progressCallback) throws(RPCError) in
                let (result, _) = try context.view.batchUpdate(
                    params, cancellation: context.cancellation, total: { progress?.setTotal(Int64($0)) },
                    progress: progressCallback)
                return (result, Int64(result.count))
            }
        }
        handlers.register(BatchDelete.self, .write, .scoped) { (params, context) throws(RPCError) in
            let progress = context.progress(token: params.workDoneToken)
            progress?.begin(title: "Deleting \(params.entity)", total: nil)
            return try reportingProgress(progress) { (progressCallback) throws(RPCError) in
                let (result, _) = try context.view.batchDelete(
                    params, cancellation: context.cancellation, total: { progress?.setTotal(Int64($0)) },
                    progress: progressCallback)
                return (result, Int64(result.count))
            }
        }
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
