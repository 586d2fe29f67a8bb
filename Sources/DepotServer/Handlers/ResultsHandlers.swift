import DepotProtocol

extension DepotService {
    static func registerResultsHandlers(_ handlers: inout HandlerRegistry) {
        handlers.registerOrdered(ResultsSubscribe.self, waitsForCommits: true, .scoped) {
            (params, context, reply) throws(RPCError) in
            // The effective request (request AND scope) decides membership and sharing.
            try context.core.results.subscribe(
                params, definition: context.view.resultsDefinition(params), context: context, reply: reply)
        }
        // The rows of the session's own subscriptions, whose sets were read in its key's scope.
        handlers.registerOrdered(ResultsObjects.self, waitsForCommits: true, .scoped) {
            (params, context, reply) throws(RPCError) in
            try context.core.results.objects(params, context: context, reply: reply)
        }
        handlers.registerOrdered(ResultsSnapshot.self, waitsForCommits: true, .scoped) {
            (params, context, reply) throws(RPCError) in
            context.core.results.snapshot(params, context: context, reply: reply)
        }
        handlers.registerOrdered(
            ResultsUnsubscribe.self, waitsForCommits: false,
            .unscoped(reason: "ends one of the session's subscriptions: reads no rows")
        ) {
            (params, context, reply) throws(RPCError) in
            context.core.results.unsubscribe(
                params.subscription, routingID: context.routingID, context: context.core, reply: reply)
        }
        handlers.register(
            ResultsDeleteCache.self, .write, .adminOnly(reason: "deletes a named results cache of the whole store")
        ) { (params, context) throws(RPCError) in
            try context.core.results.deleteCache(params.cacheName, store: context.view.unscopedStore())
            return Null()
        }
    }
}
