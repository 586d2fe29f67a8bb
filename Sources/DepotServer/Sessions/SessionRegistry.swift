import DepotProtocol
import DepotStore
import Foundation
import Synchronization

/// Every open session, shared by the transport thread (which opens, touches
/// and expires them) and the workers (which register and end requests). Their
/// `store/observe` observers are the publish lane's (``ObserverLane``), not here.
final class SessionRegistry: Sendable {
    private let sessions = Mutex<[[UInt8]: Session]>([:])

    /// Opens a session for `routingID`; `nil` if one is already open.
    func open(
        routingID: [UInt8], clientInfo: ImplementationInfo?, keyID: String? = nil, keyName: String? = nil
    ) -> Session? {
        sessions.withLock { sessions in
            guard sessions[routingID] == nil else { return nil }
            let session = Session(
                id: UUID().uuidString.lowercased(), routingID: routingID, clientInfo: clientInfo, keyID: keyID,
                keyName: keyName, lastSeen: .now)
            sessions[routingID] = session
            return session
        }
    }

    /// The session of `routingID`, if open.
    func session(for routingID: [UInt8]) -> Session? {
        sessions.withLock { $0[routingID] }
    }

    /// Whether `routingID` has a session (without copying it, as ``session(for:)`` does).
    func hasSession(_ routingID: [UInt8]) -> Bool {
        sessions.withLock { $0.index(forKey: routingID) != nil }
    }

    /// Notes that `routingID` sent something; returns whether it has a session.
    @discardableResult
    func touch(_ routingID: [UInt8]) -> Bool {
        // One look-up, and no copy of the session (every request touches it).
        sessions.withLock { sessions in
            guard let index = sessions.index(forKey: routingID) else { return false }
            sessions.values[index].lastSeen = .now
            return true
        }
    }

    /// Closes the session, cancelling its running requests; returns it if it was open.
    @discardableResult
    func close(_ routingID: [UInt8]) -> Session? {
        let session = sessions.withLock { $0.removeValue(forKey: routingID) }
        session?.inFlight.values.forEach { $0.cancel() }
        return session
    }

    /// Closes every session silent for longer than `limit`; returns them.
    func expire(silentFor limit: Duration) -> [Session] {
        let now = ContinuousClock.now
        let expired = sessions.withLock { sessions in
            // A session waiting for an answer is not silent: a long fetch or a write queued
            // behind batches must not cost the client its session.
            let stale = sessions.values.filter { now - $0.lastSeen > limit && $0.inFlight.isEmpty }
            for session in stale { sessions[session.routingID] = nil }
            return stale
        }
        expired.forEach { $0.inFlight.values.forEach { $0.cancel() } }
        return expired
    }

    /// Registers a running request; returns its cancellation flag.
    func begin(_ id: RequestID, routingID: [UInt8]) -> Cancellation {
        let cancellation = Cancellation()
        sessions.withLock { $0[routingID]?.inFlight[id] = cancellation }
        return cancellation
    }

    /// Registers a running request unless the session already has `limit` in
    /// flight; `nil` then (a request of a peer without a session is always let through).
    func begin(_ id: RequestID, routingID: [UInt8], limit: Int) -> Cancellation? {
        let cancellation = Cancellation()
        let admitted = sessions.withLock { sessions in
            guard let session = sessions[routingID] else { return true }
            guard session.inFlight.count < limit else { return false }
            sessions[routingID]!.inFlight[id] = cancellation
            return true
        }
        return admitted ? cancellation : nil
    }

    /// Forgets a finished request.
    func end(_ id: RequestID, routingID: [UInt8]) {
        sessions.withLock { _ = $0[routingID]?.inFlight.removeValue(forKey: id) }
    }

    /// Cancels a running request of the session; `false` if it is not running.
    @discardableResult
    func cancel(_ id: RequestID, routingID: [UInt8]) -> Bool {
        guard let cancellation = sessions.withLock({ $0[routingID]?.inFlight[id] }) else { return false }
        cancellation.cancel()
        return true
    }

    /// Cancels every running request of every session (shutdown).
    func cancelAll() {
        sessions.withLock { $0.values.flatMap { $0.inFlight.values } }.forEach { $0.cancel() }
    }

    /// The routing ids of the sessions opened with one of `keyIDs`.
    func routingIDs(ofKeys keyIDs: Set<String>) -> [[UInt8]] {
        sessions.withLock { $0.values.filter { $0.keyID.map(keyIDs.contains) ?? false }.map(\.routingID) }
    }

    /// Every open session, as of now (for `server/stats`).
    var all: [Session] { sessions.withLock { Array($0.values) } }

    /// How many sessions are open.
    var count: Int { sessions.withLock { $0.count } }
}
