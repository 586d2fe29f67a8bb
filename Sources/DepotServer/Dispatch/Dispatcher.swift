import DepotProtocol
import DepotStore
import Dispatch
import Logging
import Synchronization

/// Turns one inbound frame into handler calls and responses (transport thread).
///
/// Parses the JSON, enforces JSON-RPC 2.0 and the session rules (-32002 before
/// `initialize`), and runs each request where its ``Execution`` says: inline,
/// on the reader pool, or on the single writer queue. Batches run in order on
/// one worker and answer with one array.
final class Dispatcher: Sendable {
    private let handlers: HandlerRegistry
    private unowned let server: DepotServer
    private let readers = DispatchQueue(label: "depot.reader", attributes: .concurrent)
    let writer = DispatchQueue(label: "depot.writer")
    private let parser = DispatchQueue(label: "depot.parser")
    /// Peers with messages waiting on the parser queue, and how many.
    private let deferredPeers = Mutex<[[UInt8]: Int]>([:])

    /// Methods that work before `initialize`.
    private static let preSession: Set<String> = [Initialize.name, Ping.name]

    init(server: DepotServer, handlers: HandlerRegistry) {
        self.server = server
        self.handlers = handlers
    }

    /// The names of the methods it serves.
    var methodNames: [String] { handlers.methodNames }

    /// Handles one inbound frame from `routingID`.
    func receive(_ payload: [UInt8], from routingID: [UInt8]) {
        server.sessions.touch(routingID)
        // A large message (a big batchInsert) takes long to parse: parse it off the
        // transport thread so other clients' pings keep flowing. Later messages of
        // the same peer follow it through the same serial queue, keeping its order.
        let deferred = payload.count >= Self.largeMessage || deferredPeers.withLock { $0[routingID] != nil }
        guard deferred else { return handle(payload, from: routingID) }
        deferredPeers.withLock { $0[routingID, default: 0] += 1 }
        parser.async { [self] in
            handle(payload, from: routingID)
            deferredPeers.withLock { peers in
                peers[routingID, default: 1] -= 1
                if peers[routingID] == 0 { peers[routingID] = nil }
            }
        }
    }

    /// Messages at least this large are parsed off the transport thread.
    static let largeMessage = 256 << 10

    /// Parses and dispatches one message.
    private func handle(_ payload: [UInt8], from routingID: [UInt8]) {
        let json: JSONValue
        do {
            json = try JSONParser.parse(payload)
        } catch {
            let rpcError = RPCError(
                code: .parseError, message: "parse error: \(error)", data: ["offset": .int(Int64(error.offset))])
            return server.send(MessageEncoder.response(id: nil, error: rpcError), to: routingID)
        }
        if case .array(let elements) = json {
            return receiveBatch(elements, from: routingID)
        }
        switch classify(json, from: routingID) {
        case .respond(let bytes):
            server.send(bytes, to: routingID)
        case .run(let id, let method, let params, let handler):
            // Registered now, not when a worker picks it up: a $/cancelRequest for a
            // request still queued behind others must find it.
            let cancellation = server.sessions.begin(id, routingID: routingID)
            let run: @Sendable () -> Void = { [self] in
                let bytes = execute(
                    id: id, method: method, params: params, handler: handler, routingID: routingID,
                    cancellation: cancellation)
                server.send(bytes, to: routingID)
            }
            switch handler.execution {
            case .inline: run()
            case .read: readers.async(execute: run)
            case .write:
                server.stats.writeQueued()
                writer.async { [server] in server.stats.measureWrite(run) }
            }
        case .none:
            break
        }
    }

    private enum Step {
        case respond([UInt8])
        case run(RequestID, String, JSONValue?, Handler)
        case none
    }

    private func classify(_ json: JSONValue, from routingID: [UInt8]) -> Step {
        let message: Message
        do {
            message = try Message.decode(json)
        } catch {
            return .respond(MessageEncoder.response(id: error.id, error: error.error))
        }
        switch message {
        case .request(let id, let method, let params):
            guard let handler = handlers[method] else {
                return .respond(
                    MessageEncoder.response(
                        id: id,
                        error: RPCError(
                            code: .methodNotFound, message: "method '\(method)' not found",
                            data: ["method": .string(method)])))
            }
            if !Self.preSession.contains(method) && server.sessions.session(for: routingID) == nil {
                return .respond(
                    MessageEncoder.response(
                        id: id,
                        error: RPCError(
                            code: .serverNotInitialized, message: "'\(method)' before initialize: send initialize first"
                        )))
            }
            return .run(id, method, params, handler)
        case .notification(let method, let params):
            if method == CancelRequest.name, let params,
                let cancel = try? JSONCoding.decode(CancelRequest.Parameters.self, from: params)
            {
                server.sessions.cancel(cancel.id, routingID: routingID)
            }
            return .none
        case .result, .error:
            return .none
        }
    }

    /// Runs one request and returns its response bytes.
    private func execute(
        id: RequestID, method: String, params: JSONValue?, handler: Handler, routingID: [UInt8],
        cancellation: Cancellation? = nil
    ) -> [UInt8] {
        let cancellation = cancellation ?? server.sessions.begin(id, routingID: routingID)
        defer { server.sessions.end(id, routingID: routingID) }
        let context = RequestContext(server: server, routingID: routingID, requestID: id, cancellation: cancellation)
        do throws(RPCError) {
            if server.isStopping && handler.execution != .inline {
                throw RPCError(code: .serverCancelled, message: "the server is shutting down")
            }
            let result = try handler.run(params, context)
            return MessageEncoder.response(id: id, resultJSON: result)
        } catch {
            if error.code == .internalError {
                server.logger.error("\(method) failed: \(error.message)")
            }
            return MessageEncoder.response(id: id, error: error)
        }
    }

    private func receiveBatch(_ elements: [JSONValue], from routingID: [UInt8]) {
        guard !elements.isEmpty else {
            let error = RPCError(code: .invalidRequest, message: "an empty batch is not a valid request")
            return server.send(MessageEncoder.response(id: nil, error: error), to: routingID)
        }
        let steps = elements.map { classify($0, from: routingID) }
        let needsWriter = steps.contains {
            if case .run(_, _, _, let handler) = $0 { handler.execution == .write } else { false }
        }
        let run: @Sendable () -> Void = { [self] in
            var responses: [[UInt8]] = []
            for step in steps {
                switch step {
                case .respond(let bytes): responses.append(bytes)
                case .run(let id, let method, let params, let handler):
                    responses.append(
                        execute(id: id, method: method, params: params, handler: handler, routingID: routingID))
                case .none: break
                }
            }
            guard !responses.isEmpty else { return }
            var writer = JSONWriter()
            writer.writeRaw("[")
            for (index, response) in responses.enumerated() {
                if index > 0 { writer.writeRaw(",") }
                writer.writeRaw(response)
            }
            writer.writeRaw("]")
            server.send(writer.bytes, to: routingID)
        }
        if needsWriter {
            server.stats.writeQueued()
            writer.async { [server] in server.stats.measureWrite(run) }
        } else {
            readers.async(execute: run)
        }
    }

    /// Waits until every queued write and read has finished.
    func drain() {
        parser.sync {}
        writer.sync {}
        readers.sync(flags: .barrier) {}
    }
}
