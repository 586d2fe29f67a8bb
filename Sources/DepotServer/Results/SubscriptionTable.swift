import DepotProtocol

/// Every live subscription: its session, the set it follows, its `seq`, and
/// how many each session holds (its quota, `--max-subscriptions-per-session`).
///
/// A value owned by ``ResultsEngine`` and touched only in publish-lane jobs.
struct SubscriptionTable {
    /// One subscription.
    struct Subscription: Sendable {
        let id: String
        let routingID: [UInt8]
        let setKey: ByteString
        /// The `seq` of the last notification it was sent.
        var seq: Int64 = 0
        /// Deltas were dropped because the session's queue overflowed; a
        /// `results/didInvalidate` is owed once it drains.
        var overflowed = false
    }

    private var byID: [String: Subscription] = [:]
    private var bySession: [[UInt8]: Set<String>] = [:]
    private var nextID = 1

    /// How many subscriptions are live.
    var count: Int { byID.count }

    /// Every live subscription's id.
    var ids: Set<String> { Set(byID.keys) }

    /// How many subscriptions the session `routingID` holds.
    func count(of routingID: [UInt8]) -> Int { bySession[routingID]?.count ?? 0 }

    /// The ids of the session's subscriptions, in a stable order.
    func ids(of routingID: [UInt8]) -> [String] { (bySession[routingID] ?? []).sorted() }

    /// The subscription `id`, to read or to change (it must exist to be changed).
    subscript(id: String) -> Subscription? {
        get { byID[id] }
        set {
            guard let newValue, byID[id] != nil else { return }
            byID[id] = newValue
        }
    }

    /// The subscription `id` if the session `routingID` holds it.
    func lookup(_ id: String, of routingID: [UInt8]) -> Subscription? {
        guard let subscription = byID[id], subscription.routingID == routingID else { return nil }
        return subscription
    }

    /// Adds a subscription of `routingID` to the set under `setKey` and returns it, with a new id.
    mutating func add(routingID: [UInt8], setKey: ByteString) -> Subscription {
        let subscription = Subscription(id: "s\(nextID)", routingID: routingID, setKey: setKey)
        nextID += 1
        byID[subscription.id] = subscription
        bySession[routingID, default: []].insert(subscription.id)
        return subscription
    }

    /// Removes the subscription `id`; it no longer counts against its session's quota.
    @discardableResult
    mutating func remove(_ id: String) -> Subscription? {
        guard let subscription = byID.removeValue(forKey: id) else { return nil }
        bySession[subscription.routingID]?.remove(id)
        if bySession[subscription.routingID]?.isEmpty == true { bySession[subscription.routingID] = nil }
        return subscription
    }
}
