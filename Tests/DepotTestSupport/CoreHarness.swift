import DepotProtocol
import DepotServer
import DepotStore
import Foundation

/// A service core over a new store in `directory`, with `model` defined
/// through the core by a peer of its own ([9]); every message it sends is recorded.
///
/// - Throws: when the store cannot be opened or the model is refused.
public func makeCore(
    in directory: URL, model: String, configure: (inout ServerConfiguration) -> Void = { _ in }
) throws -> (DepotService, RecordingOutbox) {
    try makeCore(in: directory, model: model, keys: nil, configure: configure)
}

/// A service core like ``makeCore(in:model:configure:)`` whose clients are the
/// `keys` (authorized-keys text, ``CoreKeys``) with `policy`'s roles and scopes
/// (DESIGN.md §2): a peer names its key with ``request(_:_:key:id:_:_:)``, as
/// the transport does after a CURVE handshake. No process, no socket.
///
/// - Throws: when the store cannot be opened, the files are refused or the model is refused.
public func makeCore(
    in directory: URL, model: String, keys: String, policy: String,
    configure: (inout ServerConfiguration) -> Void = { _ in }
) throws -> (DepotService, RecordingOutbox) {
    let parsedPolicy = try AccessPolicy(parsing: policy, source: "policy")
    let authorized = try AuthorizedKeys(parsing: keys, source: "keys", policy: parsedPolicy)
    return try makeCore(in: directory, model: model, keys: authorized, configure: configure)
}

private func makeCore(
    in directory: URL, model: String, keys: AuthorizedKeys?, configure: (inout ServerConfiguration) -> Void
) throws -> (DepotService, RecordingOutbox) {
    let store = try Store(path: directory.appendingPathComponent("depot.sqlite").path)
    let outbox = RecordingOutbox()
    var configuration = ServerConfiguration(dataDirectory: directory)
    configure(&configuration)
    let service =
        if let keys {
            try DepotService(configuration: configuration, store: store, outbox: outbox, keys: keys)
        } else {
            try DepotService(configuration: configuration, store: store, outbox: outbox)
        }
    // The model is defined by a peer without a key: unscoped, like one on the ipc:// endpoint.
    let admin: [UInt8] = [9]
    request(service, admin, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
    _ = try outbox.response(1, of: admin)
    request(service, admin, id: 2, "model/define", model)
    guard try outbox.response(2, of: admin)["result"] != nil else {
        throw RecordingOutbox.TimeoutError(description: "model/define failed: \(outbox.received(by: admin))")
    }
    return (service, outbox)
}

/// Made-up public keys for an in-memory core's authorized-keys text: the core
/// never runs a CURVE handshake, it only looks keys up by their text.
public enum CoreKeys {
    /// The `index`th key: 40 Z85 characters.
    public static func publicKey(_ index: Int) -> String {
        let digits = String(index)
        return String(repeating: "0", count: 40 - digits.count) + digits
    }
}

/// Sends a request from `peer` as the client holding the public key `key`.
public func request(
    _ service: DepotService, _ peer: [UInt8], key: String, id: Int, _ method: String, _ params: String
) {
    service.receive(
        Array(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"#.utf8), from: peer,
        keyID: key)
}

/// An in-memory core over a new store (in a temporary directory) with a model, and numbered
/// requests to it from any peer: the setup every in-memory property test shares. The core stops
/// and its directory goes when this does.
public final class CoreCaller {
    /// The core.
    public let service: DepotService
    /// Everything the core sent, by peer.
    public let outbox: RecordingOutbox
    /// What a failed call names first (a property test's seed).
    public let label: String
    private let directory: URL
    // The model's peer ([9]) used ids 1 and 2 (``makeCore(in:model:configure:)``): every id is above them.
    private var nextID = 10

    /// A core over a new store with `model` (and, with `keys`, those clients with `policy`'s
    /// roles and scopes), whose `peers` have sent `initialize`.
    ///
    /// - Throws: when the store, the keys or the model are refused, or an `initialize` fails.
    public init(
        model: String, name: String, keys: String? = nil, policy: String = "", peers: [[UInt8]] = [],
        label: String = "", configure: (inout ServerConfiguration) -> Void = { _ in }
    ) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.label = label
        do {
            (service, outbox) =
                if let keys {
                    try makeCore(in: directory, model: model, keys: keys, policy: policy, configure: configure)
                } else {
                    try makeCore(in: directory, model: model, configure: configure)
                }
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        for peer in peers { _ = try call(peer, "initialize", #"{"protocolVersion": "1"}"#) }
    }

    deinit {
        service.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Sends request `method` from `peer` (as the client holding `key`, when given) and returns
    /// its whole response, result or error.
    public func send(_ peer: [UInt8], key: String? = nil, _ method: String, _ params: String) throws -> JSONValue {
        nextID += 1
        if let key {
            request(service, peer, key: key, id: nextID, method, params)
        } else {
            request(service, peer, id: nextID, method, params)
        }
        return try outbox.response(nextID, of: peer)
    }

    /// ``send(_:key:_:_:)`` with `params` as a value.
    public func send(_ peer: [UInt8], key: String? = nil, _ method: String, _ params: JSONValue) throws -> JSONValue {
        try send(peer, key: key, method, String(decoding: JSONWriter.encode(params), as: UTF8.self))
    }

    /// Sends request `method` from `peer` and returns its result.
    ///
    /// - Throws: ``CallError`` naming the request and the error it got.
    public func call(_ peer: [UInt8], key: String? = nil, _ method: String, _ params: String) throws -> JSONValue {
        let response = try send(peer, key: key, method, params)
        guard let result = response["result"] else {
            throw CallError(description: "\(label)\(label.isEmpty ? "" : ": ")\(method) \(params) failed: \(response)")
        }
        return result
    }

    /// ``call(_:key:_:_:)`` with `params` as a value.
    public func call(_ peer: [UInt8], key: String? = nil, _ method: String, _ params: JSONValue) throws -> JSONValue {
        try call(peer, key: key, method, String(decoding: JSONWriter.encode(params), as: UTF8.self))
    }

    /// A request that should have succeeded got an error.
    public struct CallError: Error, CustomStringConvertible {
        /// The request, and the response it got.
        public let description: String
    }
}
