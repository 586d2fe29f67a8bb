import DepotProtocol
import DepotStore
import Synchronization

/// Whether a handler already put its response on the wire (``RequestContext/respondNow(_:)``).
final class ResponseSlot: Sendable {
    private let sent = Atomic<Bool>(false)

    /// Whether the response went out.
    var isSent: Bool { sent.load(ordering: .acquiring) }

    func markSent() { sent.store(true, ordering: .releasing) }
}

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
    /// Where an early response is recorded; `nil` inside a JSON-RPC batch, whose answers go out
    /// together, and for writes, which answer through the publish lane.
    let responseSlot: ResponseSlot?
    /// The group commit's transaction to join (``Store/save(_:in:)``), when the request runs in one.
    var writeGroup: WriteGroup? = nil
    /// The client's CURVE key on an authenticated endpoint (`nil` on `ipc://` or plain TCP).
    var key: AuthorizedKey? = nil

    /// The store.
    var store: Store { service.store }

    /// Sends a notification to this request's session.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters) {
        service.notify(method, params, to: routingID)
    }

    /// Sends the response with `resultJSON` now, from the calling thread, and
    /// returns `true`; `false` when this request cannot answer early (inside a
    /// batch), and the handler returns its result as usual.
    ///
    /// The results engine answers `results/subscribe`, `results/objects` and
    /// `results/snapshot` this way, under its lock, so that each answer sits in
    /// the session's stream exactly where its `seq` says (DESIGN.md §7).
    func respondNow(_ resultJSON: [UInt8]) -> Bool {
        guard let responseSlot, let requestID else { return false }
        service.send(MessageEncoder.response(id: requestID, resultJSON: resultJSON), to: routingID)
        responseSlot.markSent()
        return true
    }

    /// A work-done progress reporter for `token`, or `nil` when the request carried none.
    func progress(token: JSONValue?) -> ProgressReporter? {
        token.map { ProgressReporter(token: $0, routingID: routingID, service: service) }
    }
}
