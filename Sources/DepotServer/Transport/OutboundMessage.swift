/// One message waiting to go out: the peer's routing id and the JSON bytes.
struct OutboundMessage: Sendable {
    var routingID: [UInt8]
    var payload: [UInt8]
    /// Part of a transaction's fan-out to many peers: sent a slice at a time, and a
    /// peer with nothing of it queued is not kept waiting behind it.
    var isFanOut = false
}
