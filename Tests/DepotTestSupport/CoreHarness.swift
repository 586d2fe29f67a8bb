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
    let store = try Store(path: directory.appendingPathComponent("depot.sqlite").path)
    let outbox = RecordingOutbox()
    var configuration = ServerConfiguration(dataDirectory: directory)
    configure(&configuration)
    let service = try DepotService(configuration: configuration, store: store, outbox: outbox)
    let admin: [UInt8] = [9]
    request(service, admin, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
    _ = try outbox.response(1, of: admin)
    request(service, admin, id: 2, "model/define", model)
    guard try outbox.response(2, of: admin)["result"] != nil else {
        throw RecordingOutbox.TimeoutError(description: "model/define failed: \(outbox.received(by: admin))")
    }
    return (service, outbox)
}
