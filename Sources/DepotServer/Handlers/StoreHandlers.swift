import DepotProtocol
import DepotStore

extension DepotService {
    static func registerStoreHandlers(_ handlers: inout HandlerRegistry) {
        handlers.registerRaw(StoreFetch.self, .read) { (request, context) throws(RPCError) in
            try fetch(context.scoped(request, field: "params"), context: context)
        }
        handlers.register(StoreCount.self, .read) { (request, context) throws(RPCError) in
            StoreCount.Result(count: try context.store.count(context.scoped(request, field: "params")))
        }
        handlers.register(StoreGet.self, .read) { (params, context) throws(RPCError) in
            let objects = try context.store.objects(ids: params.ids, properties: params.properties)
            guard let scopeGuard = context.scopeGuard else { return StoreGet.Result(objects: objects) }
            // An object outside the read scope does not exist for the key: null, like a missing one.
            let visible = try scopeGuard.visible(params.ids, store: context.store)
            return StoreGet.Result(
                objects: zip(params.ids, objects).map { id, object in visible.contains(id) ? object : .null })
        }
        handlers.registerRaw(StoreSave.self, .write) { (params, context) throws(RPCError) in
            // What it commits reaches subscribers through the store's commit stream. The result is
            // written straight to bytes (every save answers with one), not through an Encoder.
            try context.store.save(
                params, in: context.writeGroup,
                writeScope: context.key.flatMap { key in key.scope?.writeScope(keyName: key.name) }
            ).0.jsonBytes
        }
        handlers.allowGroupCommit(StoreSave.self)
        handlers.register(StoreObserve.self, .inline) { (params, context) throws(RPCError) in
            let schema = context.store.schema
            for (index, name) in (params.entities ?? []).enumerated() {
                _ = try schema.entity(name, field: "params.entities[\(index)]")
            }
            // A scoped key hears only of its scope: what it sees is read in the publish lane, in commit order.
            let scoped = context.key?.scope.map { ScopedObservation(scope: $0, entities: params.entities) }
            let registration = ObserverRegistration(parameters: params, scoped: scoped)
            guard let observer = context.service.sessions.addObserver(registration, routingID: context.routingID)
            else {
                throw RPCError(code: .serverNotInitialized, message: "the session is closed")
            }
            if let scoped { context.service.startObservation(scoped, observer: observer, routingID: context.routingID) }
            return StoreObserve.Result(observer: observer)
        }
        handlers.register(StoreUnobserve.self, .inline) { (params, context) throws(RPCError) in
            guard context.service.sessions.removeObserver(params.observer, routingID: context.routingID) else {
                throw .notFound("no observer '\(params.observer)' in this session", id: params.observer)
            }
            return Null()
        }
        handlers.register(StoreHistory.self, .read) { (params, context) throws(RPCError) in
            // A replica that joined its cluster from a snapshot has no history before it.
            if let begins = try context.store.historyBegins(), params.since < begins {
                throw .invalidParams(
                    "this daemon's history begins after transaction \(begins) (it started from the cluster's snapshot, joining or rebuilding itself): ask for since >= \(begins), or ask a daemon that has it",
                    field: "since")
            }
            guard let key = context.key, let scope = key.scope else {
                return try context.store.history(since: params.since, limit: params.limit)
            }
            // A scoped key reads what its observer heard: judged on the values recorded with each transaction.
            let filter = try HistoryScope(key: key, scope: scope, schema: context.store.schema)
            var unjudged = false
            do throws(RPCError) {
                return try context.store.history(since: params.since, limit: params.limit) {
                    (entry) throws(RPCError) in
                    guard filter.judges(entry) else {
                        unjudged = true
                        throw filter.unjudged(through: entry.number)
                    }
                    return try filter.changes(of: entry)
                }
            } catch {
                guard unjudged else { throw error }
                // Recorded before a policy that reads these values: name the newest such transaction.
                let older = try context.store.history(since: params.since, limit: 10_000) { entry in
                    filter.judges(entry) ? nil : [:]
                }
                throw filter.unjudged(through: older.transactions.last?.transaction ?? params.since)
            }
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
        let limit = context.service.configuration.maxFetchObjects * (resultType == .ids ? 10 : 1)
        var elements = JSONWriter()
        var gathered = 0
        var completed = 0
        var related: PrefetchedGraph?
        do throws(RPCError) {
            let (count, transaction) = try context.store.fetchEncoded(
                request, cancellation: context.cancellation,
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
                    context.service.send(message.bytes, to: context.routingID)
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
