import DepotProtocol

extension DepotServer {
    static func registerResultsHandlers(_ handlers: inout HandlerRegistry) {
        handlers.registerRaw(ResultsSubscribe.self, .read) { (params, context) throws(RPCError) in
            try context.server.results.subscribe(params, context: context)
        }
        handlers.registerRaw(ResultsObjects.self, .read) { (params, context) throws(RPCError) in
            try context.server.results.objects(params, context: context)
        }
        handlers.registerRaw(ResultsSnapshot.self, .read) { (params, context) throws(RPCError) in
            try context.server.results.snapshot(params, context: context)
        }
        handlers.register(ResultsUnsubscribe.self, .inline) { (params, context) throws(RPCError) in
            try context.server.results.unsubscribe(
                params.subscription, routingID: context.routingID, server: context.server)
            return Null()
        }
        handlers.register(ResultsDeleteCache.self, .write) { (params, context) throws(RPCError) in
            try context.server.results.deleteCache(params.cacheName, store: context.store)
            return Null()
        }
    }
}
