import DepotProtocol

extension DepotService {
    static func registerResultsHandlers(_ handlers: inout HandlerRegistry) {
        handlers.registerRaw(ResultsSubscribe.self, .read) { (params, context) throws(RPCError) in
            try context.service.results.subscribe(params, context: context)
        }
        handlers.registerRaw(ResultsObjects.self, .read) { (params, context) throws(RPCError) in
            try context.service.results.objects(params, context: context)
        }
        handlers.registerRaw(ResultsSnapshot.self, .read) { (params, context) throws(RPCError) in
            try context.service.results.snapshot(params, context: context)
        }
        handlers.register(ResultsUnsubscribe.self, .inline) { (params, context) throws(RPCError) in
            try context.service.results.unsubscribe(
                params.subscription, routingID: context.routingID, service: context.service)
            return Null()
        }
        handlers.register(ResultsDeleteCache.self, .write) { (params, context) throws(RPCError) in
            try context.service.results.deleteCache(params.cacheName, store: context.store)
            return Null()
        }
    }
}
