import DepotProtocol
import DepotStore

extension DepotServer {
    static func registerStoreHandlers(_ handlers: inout HandlerRegistry) {
        handlers.register(StoreFetch.self, .read) { (request, context) throws(RPCError) in
            try fetch(request, context: context)
        }
        handlers.register(StoreCount.self, .read) { (request, context) throws(RPCError) in
            StoreCount.Result(count: try context.store.count(request))
        }
        handlers.register(StoreGet.self, .read) { (params, context) throws(RPCError) in
            StoreGet.Result(objects: try context.store.objects(ids: params.ids, properties: params.properties))
        }
        handlers.register(StoreSave.self, .write) { (params, context) throws(RPCError) in
            let (result, transaction) = try context.store.save(params)
            context.server.publish(transaction)
            return result
        }
        handlers.register(StoreObserve.self, .inline) { (params, context) throws(RPCError) in
            let schema = context.store.schema
            for (index, name) in (params.entities ?? []).enumerated() {
                _ = try schema.entity(name, field: "params.entities[\(index)]")
            }
            guard let observer = context.server.sessions.addObserver(params, routingID: context.routingID) else {
                throw RPCError(code: .serverNotInitialized, message: "the session is closed")
            }
            return StoreObserve.Result(observer: observer)
        }
        handlers.register(StoreUnobserve.self, .inline) { (params, context) throws(RPCError) in
            guard context.server.sessions.removeObserver(params.observer, routingID: context.routingID) else {
                throw .notFound("no observer '\(params.observer)' in this session", id: params.observer)
            }
            return Null()
        }
        handlers.register(StoreHistory.self, .read) { (params, context) throws(RPCError) in
            try context.store.history(since: params.since, limit: params.limit)
        }
    }

    /// `store/fetch` with optional progress and partial results.
    static func fetch(_ request: FetchRequest, context: RequestContext) throws(RPCError) -> StoreFetch.Result {
        let progress = context.progress(token: request.workDoneToken)
        let partialToken = request.partialResultToken
        let title = "Fetching \(request.entity)"
        // With countFirst the begin waits for the count, so that it carries the total (§8).
        if request.countFirst != true { progress?.begin(title: title, total: nil) }
        var values: [JSONValue] = []
        var completed = 0
        do throws(RPCError) {
            let (count, transaction) = try context.store.fetch(
                request, cancellation: context.cancellation,
                total: progress.map { reporter in { reporter.begin(title: title, total: Int64($0)) } }
            ) { (batch) throws(RPCError) in
                completed = batch.completed
                if let partialToken {
                    context.server.notifyProgress(token: partialToken, value: ["objects": .array(batch.values)], to: context.routingID)
                } else {
                    values.append(contentsOf: batch.values)
                    let limit = request.resultType == .ids ? context.server.configuration.maxFetchObjects * 10 : context.server.configuration.maxFetchObjects
                    if values.count > limit {
                        throw RPCError.invalidParams(
                            "the result has more than \(limit) \(request.resultType == .ids ? "ids" : "objects"): page it with limit and offset, or stream it with partialResultToken",
                            field: "params.limit")
                    }
                }
                progress?.report(completed: Int64(batch.completed))
            }
            progress?.end(completed: Int64(count), cancelled: false)
            switch request.resultType ?? .objects {
            case .count: return StoreFetch.Result(count: count, transaction: transaction)
            case .ids where partialToken == nil: return StoreFetch.Result(ids: values.compactMap(\.stringValue), transaction: transaction)
            case _ where partialToken != nil: return StoreFetch.Result(objects: [], count: count, transaction: transaction)
            default: return StoreFetch.Result(objects: values, transaction: transaction)
            }
        } catch {
            progress?.end(completed: Int64(completed), cancelled: error.code == .requestCancelled)
            throw error
        }
    }
}
