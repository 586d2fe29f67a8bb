/// A JSON-RPC request read without parsing its params: the id, the method,
/// and where the params object lies in the message's bytes.
///
/// The daemon reads a large message (a million-object `store/batchInsert`)
/// this way, so that the handler can read the params one piece at a time.
/// Anything unusual (not an object, a batch, a response, params that are not
/// an object, a member it does not know) gives `nil`, and the message takes
/// the ordinary path, which reports exactly what is wrong.
public struct RawRequest: Sendable {
    /// The request's id.
    public let id: RequestID
    /// The method.
    public let method: String
    /// The byte range of the params object.
    public let params: Range<Int>

    /// Reads the envelope of `bytes`; `nil` when it is not a plain request with object params.
    public init?(_ bytes: [UInt8]) {
        var id: RequestID?
        var method: String?
        var params: Range<Int>?
        var version: JSONValue?
        let read: Bool? = try? JSONStreamReader.read(bytes) { reader in
            try reader.beginObject()
            while let key = try reader.nextKey() {
                switch key {
                case "jsonrpc": version = try reader.value()
                case "id": id = RequestID(json: try reader.value())
                case "method": method = try reader.value().stringValue
                case "params":
                    let skipped = try reader.skipValue()
                    guard bytes[skipped.range.lowerBound] == UInt8(ascii: "{") else { return false }
                    params = skipped.range
                default: return false
                }
            }
            try reader.end()
            return true
        }
        guard read == true, version == "2.0", let id, let method, !method.isEmpty, let params else { return nil }
        self.id = id
        self.method = method
        self.params = params
    }
}
