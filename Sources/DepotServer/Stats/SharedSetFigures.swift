/// One shared fetched-results set as the engine sees it, for `server/stats`.
struct SharedSetFigures: Sendable {
    /// The set's sharing key: `{"request": …, "section": …}` as JSON text.
    var key: String
    /// How many objects match.
    var rows: Int
    /// How many sections.
    var sections: Int
    /// The last transaction it reflects.
    var transaction: Int64
    /// The named cache, if any.
    var cacheName: String?
    /// Its subscriptions: (subscription id, session routing id).
    var subscribers: [(id: String, routingID: [UInt8])]
}
