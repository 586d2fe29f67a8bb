import DepotProtocol
import DepotStore

/// What a handler knows about the request it serves.
struct RequestContext: Sendable {
    /// The service core, for the store and notifications.
    let service: DepotService
    /// The peer that sent the request.
    let routingID: [UInt8]
    /// The request's id (`nil` inside notifications).
    let requestID: RequestID?
    /// Set when the client sends `$/cancelRequest` or the server shuts down.
    let cancellation: Cancellation
    /// The group commit's transaction to join (``Store/save(_:in:)``), when the request runs in one.
    var writeGroup: WriteGroup? = nil
    /// The client's CURVE key on an authenticated endpoint (`nil` on `ipc://` or plain TCP).
    var key: AuthorizedKey? = nil

    /// The store.
    var store: Store { service.store }

    /// The key's row-level scope applied to its requests, `nil` when it has none (DESIGN.md §2).
    var scopeGuard: ScopeGuard? {
        guard let key, let scope = key.scope else { return nil }
        return ScopeGuard(scope: scope, keyName: key.name, schema: store.schema)
    }

    /// `request` narrowed to the key's read scope (unchanged for an unscoped key).
    func scoped(_ request: FetchRequest, field: String) throws(RPCError) -> FetchRequest {
        try scopeGuard?.read(request, field: field) ?? request
    }

    /// Sends a notification to this request's session.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters) {
        service.notify(method, params, to: routingID)
    }

    /// A work-done progress reporter for `token`, or `nil` when the request carried none.
    func progress(token: JSONValue?) -> ProgressReporter? {
        token.map { ProgressReporter(token: $0, routingID: routingID, service: service) }
    }
}
