import DepotProtocol
import DepotStore

extension DepotService {
    static func registerStoreHandlers(_ handlers: inout HandlerRegistry) {
        handlers.registerRaw(StoreFetch.self, .read, .scoped) { (request, context) throws(RPCError) in
            try fetch(request, context: context)
        }
        handlers.register(StoreCount.self, .read, .scoped) { (request, context) throws(RPCError) in
            StoreCount.Result(count: try context.view.count(request, field: "params"))
        }
        handlers.register(StoreGet.self, .read, .scoped) { (params, context) throws(RPCError) in
            // An object outside the read scope does not exist for the key: null, like a missing one.
            StoreGet.Result(objects: try context.view.objects(ids: params.ids, properties: params.properties))
        }
        handlers.registerRaw(StoreSave.self, .write, .scoped) { (params, context) throws(RPCError) in
            // What it commits reaches subscribers through the store's commit stream. The result is
            // written straight to bytes (every save answers with one), not through an Encoder.
            try context.view.save(params, in: context.writeGroup).0.jsonBytes
        }
        handlers.allowGroupCommit(StoreSave.self)
        // Registered and answered in the publish lane, in order with the session's notifications:
        // a save sent after the answer is heard, even by a scoped observer (its baseline is read first).
        handlers.registerOrdered(StoreObserve.self, waitsForCommits: false, .scoped) {
            (params, context, reply) throws(RPCError) in
            // A scoped key hears only of its scope: what it sees is read in the publish lane, in commit order.
            let scoped = try context.view.observation(of: params.entities)
            let core = context.core
            let routingID = context.routingID
            core.observers.observe(
                ObserverRegistration(parameters: params, scoped: scoped), routingID: routingID,
                isOpen: { core.sessions.hasSession(routingID) }, context: core, reply: reply)
        }
        handlers.registerOrdered(
            StoreUnobserve.self, waitsForCommits: false,
            .unscoped(reason: "ends one of the session's observers: reads no rows")
        ) { (params, context, reply) throws(RPCError) in
            context.core.observers.unobserve(
                params.observer, routingID: context.routingID, context: context.core, reply: reply)
        }
        handlers.register(StoreHistory.self, .read, .scoped) { (params, context) throws(RPCError) in
            try context.view.history(since: params.since, limit: params.limit)
        }
    }

    /// `store/fetch` with optional progress and partial results, encoded from
    /// rows straight to the response (or to `$/progress` chunks).
    static func fetch(_ request: FetchRequest, context: RequestContext) throws(RPCError) -> [UInt8] {
        let progress = context.progress(token: request.workDoneToken)
        let partialToken = request.partialResultToken
        let title = "Fetching \(request.entity)"
        // With countFirst the begin waits for the count, so that it carries the total (§8).
        if request.countFirst != true { progress?.begin(title: title, total: nil) }
        let resultType = request.resultType ?? .objects
        let limit = context.core.configuration.maxFetchObjects * (resultType == .ids ? 10 : 1)
        var elements = JSONWriter()
        var gathered = 0
        var completed = 0
        var related: PrefetchedGraph?
        do throws(RPCError) {
            let (count, transaction) = try context.view.fetchEncoded(
                request, field: "params", cancellation: context.cancellation,
                total: progress.map { reporter in { reporter.begin(title: title, total: Int64($0)) } },
                related: { related = $0 }
            ) { (batch) throws(RPCError) in
                completed = batch.completed
                if let partialToken {
                    // The notification written around the batch in one go (a chunk is copied once, not twice).
                    var message = JSONWriter(capacity: batch.json.count + 128)
                    message.writeRaw("{\"jsonrpc\":\"2.0\",\"method\":")
                    message.write(ProgressNotification.name)
                    message.writeRaw(",\"params\":{\"token\":")
                    message.write(partialToken)
                    message.writeRaw(",\"value\":{\"objects\":[")
                    message.writeRaw(batch.json)
                    message.writeRaw("]}}}")
                    context.core.send(message.bytes, to: context.routingID)
                } else if batch.count > 0 {
                    gathered += batch.count
                    if gathered > limit {
                        throw RPCError.invalidParams(
                            "the result has more than \(limit) \(resultType == .ids ? "ids" : "objects"): page it with limit and offset, or stream it with partialResultToken",
                            field: "params.limit")
                    }
                    if !elements.bytes.isEmpty { elements.writeRaw(",") }
                    elements.writeRaw(batch.json)
                }
                progress?.report(completed: Int64(batch.completed))
            }
            progress?.end(completed: Int64(count), cancelled: false)
            var result = JSONWriter(capacity: elements.bytes.count + 64)
            switch resultType {
            case .count:
                result.writeRaw("{\"count\":")
                result.write(Int64(count))
            case _ where partialToken != nil:
                result.writeRaw("{\"count\":")
                result.write(Int64(count))
                result.writeRaw(",\"objects\":[]")
            case .ids:
                result.writeRaw("{\"ids\":[")
                result.writeRaw(elements.bytes)
                result.writeRaw("]")
            default:
                result.writeRaw("{\"objects\":[")
                result.writeRaw(elements.bytes)
                result.writeRaw("]")
            }
            result.writeRaw(",\"transaction\":")
            result.write(transaction)
            if let related {
                result.writeRaw(",\"related\":")
                result.writeRaw(related.relatedObject)
            }
            result.writeRaw("}")
            return result.bytes
        } catch {
            progress?.end(completed: Int64(completed), cancelled: error.code == .requestCancelled)
            throw error
        }
    }
}
