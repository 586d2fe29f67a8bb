import DepotProtocol
import DepotStore
import Logging

/// What a handler knows about the request it serves.
///
/// It holds no store: the rows are reached through ``view``, the key's view of the store that
/// the dispatcher built from the method's declared ``Scoping`` (DESIGN.md §2, "Scopes are
/// applied by construction"), and everything else a handler needs through ``core``.
struct RequestContext: Sendable {
    /// The daemon around the handler, without its store.
    let core: HandlerCore
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

    /// The context of one request of `service`'s, reading the store through `view`.
    init(
        service: DepotService, routingID: [UInt8], requestID: RequestID?, cancellation: Cancellation, view: StoreView
    ) {
        core = HandlerCore(service: service)
        self.routingID = routingID
        self.requestID = requestID
        self.cancellation = cancellation
        self.view = view
    }

    /// Sends a notification to this request's session.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters) {
        core.notify(method, params, to: routingID)
    }

    /// A work-done progress reporter for `token`, or `nil` when the request carried none.
    func progress(token: JSONValue?) -> ProgressReporter? {
        token.map { ProgressReporter(token: $0, routingID: routingID, notifier: core) }
    }
}

/// What a handler may ask of the daemon besides rows: sessions, notifications, the
/// fetched-results engine, configuration and figures. It has no store, so a handler cannot read
/// around the key's scope by mistake: rows come through ``RequestContext/view``, and the whole
/// store only through ``StoreView/unscopedStore()``, for registrations that declared it.
struct HandlerCore: Sendable {
    /// The service; private to this file, so that its `store` stays out of handlers' reach.
    fileprivate let service: DepotService

    /// The sessions.
    var sessions: SessionRegistry { service.sessions }
    /// The `store/observe` observers (their state is the publish lane's).
    var observers: ObserverLane { service.observers }
    /// The fetched-results engine (it reads through the definitions the view built).
    var results: ResultsEngine { service.results }
    /// The daemon's configuration.
    var configuration: ServerConfiguration { service.configuration }
    /// The methods the daemon serves, sorted.
    var methodNames: [String] { service.methodNames }

    /// Ends the session of `routingID`.
    func closeSession(_ routingID: [UInt8], reason: String) { service.closeSession(routingID, reason: reason) }

    /// Queues `bytes` for `routingID`.
    func send(_ bytes: [UInt8], to routingID: [UInt8]) { service.send(bytes, to: routingID) }

    /// `server/stats` (admin only: the daemon's figures, no rows).
    func statistics(_ page: ServerStats.Parameters) throws(RPCError) -> ServerStats.Result {
        try service.statistics(page)
    }
}

extension HandlerCore: ResultsContext {
    var logger: Logger { service.logger }
    var maxSubscriptionsPerSession: Int { service.maxSubscriptionsPerSession }
    var isStopping: Bool { service.isStopping }
    var currentSchema: Schema { service.currentSchema }

    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters, to routingID: [UInt8]) {
        service.notify(method, params, to: routingID)
    }
    func send(_ messages: [(bytes: [UInt8], peer: [UInt8])]) { service.send(messages) }
    func isOverflowing(_ peer: [UInt8]) -> Bool { service.isOverflowing(peer) }
    func didChangeSent(to subscriptions: [String]) { service.didChangeSent(to: subscriptions) }
    func storeReadsMade(_ reads: ServerStats.StoreReads) { service.storeReadsMade(reads) }
    func persistCache(_ name: String, _ entry: ResultsCacheEntry) { service.persistCache(name, entry) }
    func afterCommits(_ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) { service.afterCommits(job) }
    func afterCommits(in milliseconds: Int, _ job: @escaping @Sendable (Result<Store, RPCError>) -> Void) {
        service.afterCommits(in: milliseconds, job)
    }
}
