import DepotProtocol

/// JSON-RPC 2.0 over a ``RawDealer``: no background thread, no futures, one
/// request at a time, so that a benchmark measures the daemon rather than the
/// Swift client.
///
/// ```swift
/// let client = try RawRPCClient(endpoint: daemon.endpoint)
/// try client.initialize()
/// let model = try client.call("model/define", params: #"{"entities":[...]}"#)
/// try client.roundTrip(RawRPCClient.request(id: 7, method: "ping"))  // the hot path
/// ```
final class RawRPCClient {
    /// The socket.
    let dealer: RawDealer
    private var nextID: Int64 = 1

    /// Connects to `endpoint` (no session yet: call ``initialize()``).
    init(
        endpoint: String, curve: (serverKey: String, publicKey: String, secretKey: String)? = nil,
        sharedContext: UnsafeMutableRawPointer? = nil
    ) throws {
        dealer = try RawDealer(endpoint: endpoint, curve: curve, sharedContext: sharedContext)
    }

    /// Opens the session.
    @discardableResult
    func initialize(name: String = "DepotBenchmarks") throws -> JSONValue {
        try call("initialize", params: Self.initializeParams(name: name))
    }

    /// The params of an `initialize` from a client called `name`.
    static func initializeParams(name: String) -> String {
        #"{"clientInfo":{"name":"\#(name)","version":"1"},"protocolVersion":"1","capabilities":{}}"#
    }

    /// The bytes of a request with `params` given as JSON text (or none).
    static func request(id: Int64, method: String, params: String? = nil) -> [UInt8] {
        var text = #"{"jsonrpc":"2.0","id":"# + String(id) + #","method":""# + method + "\""
        if let params { text += #","params":"# + params }
        text += "}"
        return Array(text.utf8)
    }

    /// Calls `method` and returns its parsed result; throws the server's error.
    /// Notifications arriving meanwhile are skipped.
    func call(_ method: String, params: String? = nil) throws -> JSONValue {
        let id = nextID
        nextID += 1
        try dealer.send(Self.request(id: id, method: method, params: params))
        while true {
            let json = try JSONParser.parse(try dealer.receive())
            guard json["id"] == .int(id) else { continue }
            if let error = json["error"] { throw BenchmarkError("\(method) failed: \(error.excerpt(limit: 300))") }
            return json["result"] ?? .null
        }
    }

    /// Sends prepared request bytes and waits for one answer holding `"result"`
    /// (no parse). Only for request kinds that trigger no notifications.
    func roundTrip(_ request: [UInt8]) throws {
        try dealer.roundTrip(request, expecting: "\"result\"")
    }
}
