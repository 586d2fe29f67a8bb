import DepotProtocol

extension DepotService {
    static func registerResultsHandlers(_ handlers: inout HandlerRegistry) {
        handlers.registerOrdered(ResultsSubscribe.self, waitsForCommits: true) {
            (params, context, reply) throws(RPCError) in
            // The effective request (request AND scope) decides membership and sharing.
            var params = params
            params.request = try context.scoped(params.request, field: "params.request")
            try context.service.results.subscribe(params, context: context, reply: reply)
        }
        handlers.registerOrdered(ResultsObjects.self, waitsForCommits: true) {
            (params, context, reply) throws(RPCError) in
            try context.service.results.objects(params, context: context, reply: reply)
        }
        handlers.registerOrdered(ResultsSnapshot.self, waitsForCommits: true) {
            (params, context, reply) throws(RPCError) in
            context.service.results.snapshot(params, context: context, reply: reply)
        }
        handlers.registerOrdered(ResultsUnsubscribe.self, waitsForCommits: false) {
            (params, context, reply) throws(RPCError) in
            context.service.results.unsubscribe(
                params.subscription, routingID: context.routingID, context: context.service, reply: reply)
        }
        handlers.register(ResultsDeleteCache.self, .write) { (params, context) throws(RPCError) in
            try context.service.results.deleteCache(params.cacheName, store: context.store)
            return Null()
        }
    }
}
