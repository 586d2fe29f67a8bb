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
