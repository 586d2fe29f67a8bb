import DepotClient
import DepotProtocol
import Foundation
import HummingbirdWebSocket

/// One browser tab's bridge: its WebSocket on one side, its own session with
/// `depotd` on the other.
///
/// The page speaks a small JSON protocol over the socket:
/// - page → studio `{"id": 1, "method": "store/fetch", "params": {…}}`, answered
///   `{"id": 1, "result": …}` or `{"id": 1, "error": {"code", "message", "data"}}`
///   (the daemon's own error, or -32099 when the daemon cannot be reached);
/// - studio → page, each daemon notification as `{"method": …, "params": …}`;
/// - studio → page `{"method": "studio/link", "params": {"state", "endpoint", "message"?}}`
///   with `state` `connected`, `disconnected` or `reconnected` (after a
///   reconnect the daemon's session is new: the page subscribes again).
actor BridgeSession {
    /// The error code of a request the studio could not pass on.
    static let unreachable: Int64 = -32099

    private let endpoint: String
    private var connection: DepotConnection?
    private let outgoing: AsyncStream<String>
    private let send: AsyncStream<String>.Continuation
    private var closed = false

    init(endpoint: String) {
        self.endpoint = endpoint
        (outgoing, send) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .unbounded)
    }

    /// Bridges until the browser goes away.
    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async {
        let outgoing = self.outgoing
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await text in outgoing {
                    do { try await outbound.write(.text(text)) } catch { break }
                }
            }
            group.addTask { await self.keepConnected() }
            do {
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message else { continue }
                    await self.receive(text)
                }
            } catch {}
            await self.close()
            group.cancelAll()
        }
    }

    private func close() {
        closed = true
        send.finish()
        // Says goodbye, so the daemon frees the session's subscriptions at once rather than at expiry.
        if let connection { Task { await connection.close() } }
        connection = nil
    }

    // MARK: The daemon side

    /// Connects, and retries every second while the daemon cannot be reached.
    private func keepConnected() async {
        var reported = false
        while !closed && !Task.isCancelled {
            do {
                let opened = try await DepotConnection.connect(
                    to: endpoint, clientInfo: ImplementationInfo(name: "depot studio", version: "0.1.0"),
                    timeout: .seconds(2))
                guard !closed else {
                    opened.abort()
                    return
                }
                connection = opened
                link("connected")
                await pump(opened)
                return
            } catch {
                if !reported {
                    link(
                        "disconnected",
                        message: "depotd does not answer at \(endpoint) (\(error)); retrying every second")
                }
                reported = true
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Forwards notifications and link changes until the connection closes.
    private func pump(_ connection: DepotConnection) async {
        let notifications = connection.notifications()
        let events = connection.connectionEvents()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await notification in notifications {
                    await self.forward(notification)
                }
            }
            group.addTask {
                for await event in events {
                    switch event {
                    case .disconnected:
                        await self.link(
                            "disconnected", message: "the connection to depotd dropped; reconnecting by itself")
                    case .reconnected:
                        await self.link("reconnected")
                    }
                }
            }
        }
    }

    private func forward(_ notification: ServerNotification) {
        emit(["method": .string(notification.method), "params": notification.params])
    }

    private func link(_ state: String, message: String? = nil) {
        var params: [String: JSONValue] = ["state": .string(state), "endpoint": .string(endpoint)]
        if let message { params["message"] = .string(message) }
        emit(["method": "studio/link", "params": .object(params)])
    }

    private func emit(_ value: JSONValue) {
        guard !closed else { return }
        send.yield(String(decoding: JSONWriter.encode(value), as: UTF8.self))
    }

    // MARK: The page side

    private func receive(_ text: String) {
        let message: JSONValue
        do {
            message = try JSONParser.parse(text)
        } catch {
            return emit(["id": .null, "error": ["code": -32700, "message": .string("not JSON: \(error)")]])
        }
        let id = message["id"] ?? .null
        guard let method = message["method"]?.stringValue else {
            return emit(["id": id, "error": ["code": -32600, "message": "a request needs a method"]])
        }
        guard let connection else {
            return emit([
                "id": id,
                "error": [
                    "code": .int(Self.unreachable), "message": .string("depotd does not answer at \(endpoint)"),
                ],
            ])
        }
        let params = message["params"]
        Task {
            let response: JSONValue
            do {
                let result = try await connection.call(method: method, params: params, timeout: .seconds(30))
                response = ["id": id, "result": result]
            } catch let error as DepotClientError {
                response = ["id": id, "error": Self.describe(error)]
            } catch {
                response = ["id": id, "error": ["code": .int(Self.unreachable), "message": .string("\(error)")]]
            }
            self.emit(response)
        }
    }

    private static func describe(_ error: DepotClientError) -> JSONValue {
        if let rpc = error.rpcError {
            var object: [String: JSONValue] = ["code": .int(Int64(rpc.code.rawValue)), "message": .string(rpc.message)]
            if let data = rpc.data { object["data"] = data }
            return .object(object)
        }
        return ["code": .int(unreachable), "message": .string(error.description)]
    }
}
