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
    /// The store as the request's key sees it, built by the dispatcher from the key and the
    /// method's ``Scoping``: the handler's only way to the rows (DESIGN.md §2).
    let view: StoreView
    /// The client's CURVE key on an authenticated endpoint (`nil` on `ipc://` or plain TCP).
    var key: AuthorizedKey? { view.key }
    /// The group commit's transaction to join (``Store/save(_:in:writeScope:)``), when the request runs in one.
    var writeGroup: WriteGroup? = nil

    /// Sends a notification to this request's session.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters) {
        service.notify(method, params, to: routingID)
    }

    /// A work-done progress reporter for `token`, or `nil` when the request carried none.
    func progress(token: JSONValue?) -> ProgressReporter? {
        token.map { ProgressReporter(token: $0, routingID: routingID, service: service) }
    }
}
