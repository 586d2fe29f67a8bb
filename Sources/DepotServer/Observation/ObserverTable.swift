import DepotProtocol
import DepotStore

/// Every `store/observe` registration, by session; the scoped ones filed by
/// their equality value (``ObserverFiling``); and the ids handed out (`o1`, `o2`, ...).
///
/// A value owned by ``ObserverLane`` and touched only in publish-lane jobs,
/// as ``SubscriptionTable`` is by ``ResultsEngine``: no lock of its own.
struct ObserverTable {
    /// One observer of one session, as a publish visits it.
    struct Entry {
        /// The session.
        var routingID: [UInt8]
        /// The observer's id.
        var observer: String
        /// What it asked for.
        var registration: ObserverRegistration
    }

    private var bySession: [[UInt8]: [String: ObserverRegistration]] = [:]
    private var filing = ObserverFiling()
    private var nextID = 1

    /// Whether no session observes.
    var isEmpty: Bool { bySession.isEmpty }

    /// Every registration, for what the writer must know of them (``ObserverLane``'s needs).
    var registrations: some Sequence<ObserverRegistration> { bySession.values.lazy.flatMap(\.values) }

    /// How many observers the session `routingID` has.
    func count(of routingID: [UInt8]) -> Int { bySession[routingID]?.count ?? 0 }

    /// Adds an observer to the session `routingID`; returns its new id.
    mutating func add(_ registration: ObserverRegistration, routingID: [UInt8]) -> String {
        let id = "o\(nextID)"
        nextID += 1
        bySession[routingID, default: [:]][id] = registration
        return id
    }

    /// Removes an observer; `false` if the session has no such observer.
    @discardableResult
    mutating func remove(_ id: String, routingID: [UInt8]) -> Bool {
        guard bySession[routingID]?.removeValue(forKey: id) != nil else { return false }
        if bySession[routingID]?.isEmpty == true { bySession[routingID] = nil }
        filing.file(ObserverFiling.Ref(routingID: routingID, observer: id), terms: nil)
        return true
    }

    /// Removes every observer of the session `routingID` (closed or expired).
    mutating func removeAll(of routingID: [UInt8]) {
        guard bySession.removeValue(forKey: routingID) != nil else { return }
        filing.unfile(session: routingID)
    }

    /// Files a registered scoped observer by its equality terms, or unfiles it (`nil`).
    mutating func file(_ id: String, routingID: [UInt8], terms: [String: ObserverFiling.Term]?) {
        guard bySession[routingID]?[id] != nil else { return }
        filing.file(ObserverFiling.Ref(routingID: routingID, observer: id), terms: terms)
    }

    /// The scoped observers of the sessions `routingIDs`.
    func scoped(of routingIDs: [[UInt8]]) -> [(routingID: [UInt8], observer: String, scoped: ScopedObservation)] {
        routingIDs.flatMap { routingID in
            (bySession[routingID] ?? [:]).compactMap { id, registration in
                registration.scoped.map { (routingID, id, $0) }
            }
        }
    }

    /// Every observer that `transaction` may concern: every unfiled one, and
    /// the filed ones under a value its rows held.
    func observers(concerning transaction: CommittedTransaction) -> [Entry] {
        guard !bySession.isEmpty else { return [] }
        // The filed observers are skipped unless concerned: a lookup each, no visit.
        let concerned = filing.isEmpty ? [] : filing.concerned(by: transaction)
        var found: [Entry] = []
        for (routingID, observers) in bySession {
            for (id, registration) in observers {
                if !filing.isEmpty {
                    let ref = ObserverFiling.Ref(routingID: routingID, observer: id)
                    if filing.isFiled(ref) && !concerned.contains(ref) { continue }
                }
                found.append(Entry(routingID: routingID, observer: id, registration: registration))
            }
        }
        return found
    }
}
