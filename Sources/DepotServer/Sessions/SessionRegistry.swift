import DepotProtocol
import DepotStore
import Foundation
import Synchronization

/// Every open session, shared by the transport thread (which opens, touches
/// and expires them) and the workers (which fan out notifications).
final class SessionRegistry: Sendable {
    private let sessions = Mutex<[[UInt8]: Session]>([:])
    private let nextObserver = Atomic<Int>(1)
    /// The sessions that have (or had) an observer: a publish looks at these, not at every session.
    private let observing = Mutex<Set<[UInt8]>>([])
    /// The scoped observers filed by their equality value.
    private let filing = Mutex(ObserverFiling())

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
        if session?.observers.isEmpty == false { filing.withLock { $0.unfile(session: routingID) } }
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
        let observing = expired.filter { !$0.observers.isEmpty }
        if !observing.isEmpty {
            filing.withLock { filing in observing.forEach { filing.unfile(session: $0.routingID) } }
        }
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

    /// Adds an observer to the session; returns its id.
    func addObserver(_ registration: ObserverRegistration, routingID: [UInt8]) -> String? {
        let id = "o\(nextObserver.wrappingAdd(1, ordering: .relaxed).oldValue)"
        // Both under `observing`'s lock (then the sessions'), the order the clean-up in `observers()` takes them.
        return observing.withLock { observing in
            sessions.withLock { sessions in
                guard sessions[routingID] != nil else { return nil }
                sessions[routingID]!.observers[id] = registration
                observing.insert(routingID)
                return id
            }
        }
    }

    /// Removes an observer; `false` if the session has no such observer.
    func removeObserver(_ id: String, routingID: [UInt8]) -> Bool {
        filing.withLock { $0.file(ObserverFiling.Ref(routingID: routingID, observer: id), terms: nil) }
        return sessions.withLock { $0[routingID]?.observers.removeValue(forKey: id) != nil }
    }

    /// Files a scoped observer by its equality terms (``ObserverFiling``), or unfiles it (`nil`).
    func file(_ id: String, routingID: [UInt8], terms: [String: ObserverFiling.Term]?) {
        let ref = ObserverFiling.Ref(routingID: routingID, observer: id)
        // Only while it is registered: one removed meanwhile stays unfiled.
        guard sessions.withLock({ $0[routingID]?.observers[id] != nil }) else { return }
        filing.withLock { $0.file(ref, terms: terms) }
    }

    /// Every (session, observer id, registration) registered that `transaction`
    /// may concern: every unfiled observer, and the filed ones under a value its
    /// rows held (all of them when `transaction` is `nil`).
    func observers(concerning transaction: CommittedTransaction? = nil) -> [(
        routingID: [UInt8], observer: String, registration: ObserverRegistration
    )] {
        let candidates = observing.withLock { $0 }
        guard !candidates.isEmpty else { return [] }
        // The filed observers are skipped unless concerned: a lookup each, no visit.
        let (filed, concerned) = filing.withLock { filing in
            filing.isEmpty || transaction == nil ? (nil, []) : (filing, filing.concerned(by: transaction!))
        }
        let (found, gone) = sessions.withLock { sessions in
            var found: [(routingID: [UInt8], observer: String, registration: ObserverRegistration)] = []
            var gone: [[UInt8]] = []
            for routingID in candidates {
                guard let session = sessions[routingID], !session.observers.isEmpty else {
                    gone.append(routingID)
                    continue
                }
                for (id, registration) in session.observers {
                    if let filed {
                        let ref = ObserverFiling.Ref(routingID: routingID, observer: id)
                        if filed.isFiled(ref) && !concerned.contains(ref) { continue }
                    }
                    found.append((routingID, id, registration))
                }
            }
            return (found, gone)
        }
        if !gone.isEmpty {
            // Forgotten only if still without observers: one may have been added meanwhile.
            observing.withLock { observing in
                for routingID in gone where sessions.withLock({ $0[routingID]?.observers.isEmpty ?? true }) {
                    observing.remove(routingID)
                }
            }
        }
        return found
    }

    /// The scoped observers of the sessions `routingIDs`, with the session's key id.
    func scopedObservers(of routingIDs: [[UInt8]]) -> [(
        routingID: [UInt8], keyID: String?, observer: String, scoped: ScopedObservation
    )] {
        sessions.withLock { sessions in
            routingIDs.flatMap { routingID in
                let session = sessions[routingID]
                return (session?.observers ?? [:]).compactMap { id, registration in
                    registration.scoped.map { (routingID, session?.keyID, id, $0) }
                }
            }
        }
    }

    /// Whether some session may have an observer (`false` means none has).
    var mayHaveObservers: Bool { !observing.withLock { $0.isEmpty } }

    /// The routing ids of the sessions opened with one of `keyIDs`.
    func routingIDs(ofKeys keyIDs: Set<String>) -> [[UInt8]] {
        sessions.withLock { $0.values.filter { $0.keyID.map(keyIDs.contains) ?? false }.map(\.routingID) }
    }

    /// Every open session, as of now (for `server/stats`).
    var all: [Session] { sessions.withLock { Array($0.values) } }

    /// How many sessions are open.
    var count: Int { sessions.withLock { $0.count } }
}
