import DepotProtocol

extension DepotService {
    static func registerLifecycleHandlers(_ handlers: inout HandlerRegistry) {
        let session = Scoping.unscoped(reason: "session bookkeeping: reads no rows")
        handlers.register(Initialize.self, .inline, session) { (params, context) throws(RPCError) in
            guard params.protocolVersion == depotProtocolVersion else {
                throw .invalidParams(
                    "protocolVersion '\(params.protocolVersion)' is not supported (this server speaks \"\(depotProtocolVersion)\")",
                    field: "params.protocolVersion")
            }
            let service = context.core
            guard
                let session = service.sessions.open(
                    routingID: context.routingID, clientInfo: params.clientInfo, keyID: context.key?.publicKey,
                    keyName: context.key?.name)
            else {
                throw RPCError(
                    code: .invalidRequest,
                    message: "this connection is already initialized; send disconnect first to start over")
            }
            service.logger.debug(
                "session \(session.id) opened by \(params.clientInfo?.name ?? "unnamed client")\(context.key.map { " with key '\($0.name)' (\($0.role.rawValue))" } ?? "")"
            )
            return Initialize.Result(
                serverInfo: ImplementationInfo(name: "depotd", version: service.configuration.version),
                protocolVersion: depotProtocolVersion,
                sessionId: session.id,
                heartbeatInterval: service.configuration.heartbeatInterval,
                capabilities: [
                    "batch": true, "progress": true, "partialResults": true, "cancellation": true,
                    "maxMessageSize": .int(service.configuration.maxMessageSize),
                    "methods": .array(service.methodNames.map { .string($0) }),
                ])
        }
        handlers.register(Ping.self, .inline, session) { _, _ in Empty() }
        handlers.register(Disconnect.self, .inline, session) { _, context in
            context.core.closeSession(context.routingID, reason: "disconnect")
            return Null()
        }
    }

    static func registerModelHandlers(_ handlers: inout HandlerRegistry) {
        handlers.register(ModelGet.self, .inline, .scoped) { _, context in
            // An entity whose read scope is FALSEPREDICATE does not exist for the key.
            context.view.model()
        }
        handlers.register(ModelDefine.self, .write, .adminOnly(reason: "changes the model of the whole store")) {
            (params, context) throws(RPCError) in
            try context.view.defineModel(params.entities, removing: params.remove ?? [])
        }
    }
}
