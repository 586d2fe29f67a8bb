import DepotProtocol
import DepotStore
import Foundation

/// One client connection's state, keyed by its ZeroMQ routing id.
struct Session: Sendable {
    /// The session's id, as `initialize` returned it.
    let id: String
    /// The peer's routing id on the ROUTER socket.
    let routingID: [UInt8]
    /// Who the client said it is.
    var clientInfo: ImplementationInfo?
    /// The client's CURVE public key (Z85) on an authenticated endpoint.
    var keyID: String? = nil
    /// That key's name in the authorized-keys file.
    var keyName: String? = nil
    /// When the client last sent anything.
    var lastSeen: ContinuousClock.Instant
    /// Requests still running, so `$/cancelRequest` can reach them.
    var inFlight: [RequestID: Cancellation] = [:]
}

/// One `store/observe` registration (``ObserverTable`` holds them, in the publish lane).
struct ObserverRegistration: Sendable {
    /// What it asked for.
    var parameters: StoreObserve.Parameters
    /// What a scoped key may hear of, `nil` for a key without a scope.
    var scoped: ScopedObservation?
}
