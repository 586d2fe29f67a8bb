/// One message waiting to go out: the peer's routing id and the JSON bytes.
struct OutboundMessage: Sendable {
    var routingID: [UInt8]
    var payload: [UInt8]
}
