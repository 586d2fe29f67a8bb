import DepotProtocol
import DepotStore
import Dispatch
import Logging
import Synchronization

/// Turning one inbound frame into handler calls and responses (transport thread).
///
/// Parses the JSON, enforces JSON-RPC 2.0 and the session rules (-32002 before
/// `initialize`), and runs each request where its ``Execution`` says: inline,
/// on the reader pool, on the single writer queue, or prepared on the reader
/// pool and answered from the publish lane (ordered). Batches run in order on
/// one worker and answer with one array.
extension DepotService {
    /// Methods that work before `initialize`.
    private static let preSession: Set<String> = [Initialize.name, Ping.name]

    /// The names of the methods it serves.
    var methodNames: [String] { handlers.methodNames }

    /// Handles one inbound frame from the peer `routingID` (in each peer's order).
    ///
    /// `keyID` is the client's CURVE public key on an authenticated endpoint:
    /// every request is then checked against that key's role as of now.
    /// `moreWaiting` says more messages arrived with this one and follow at
    /// once: a save then queues for the writer, to commit with them, instead
    /// of committing on the calling thread.
    public func receive(_ payload: [UInt8], from routingID: [UInt8], keyID: String? = nil, moreWaiting: Bool = false) {
        sessions.touch(routingID)
        // A large message (a big batchInsert) takes long to parse: parse it off the
        // transport thread so other clients' pings keep flowing. Later messages of
        // the same peer follow it through the same serial queue, keeping its order.
        let deferred = payload.count >= Self.largeMessage || deferredPeers.withLock { $0[routingID] != nil }
        guard deferred else { return handle(payload, from: routingID, keyID: keyID, moreWaiting: moreWaiting) }
        deferredPeers.withLock { $0[routingID, default: 0] += 1 }
        parser.async { [self] in
            handle(payload, from: routingID, keyID: keyID)
            deferredPeers.withLock { peers in
                peers[routingID, default: 1] -= 1
                if peers[routingID] == 0 { peers[routingID] = nil }
            }
        }
    }

    /// Messages at least this large are parsed off the transport thread.
    static let largeMessage = 256 << 10

    /// Writes at least this large whose handler prepares them (``Handler/prepareRawWrite``) are parsed
    /// by their preparation; below it, reading the envelope apart costs more than it saves.
    static let preparedMessage = 16 << 10

    /// Parses and dispatches one message.
    private func handle(_ payload: [UInt8], from routingID: [UInt8], keyID: String?, moreWaiting: Bool = false) {
        // A large request whose method reads raw params (a big batchInsert) is not parsed whole:
        // its handler reads the params a piece at a time, in bounded memory. It is admitted like any other.
        if payload.count >= Self.largeMessage, let raw = RawRequest(payload), handlers[raw.method]?.runRaw != nil {
            return run(
                request(
                    id: raw.id, method: raw.method, input: .raw(RawParams(bytes: payload, range: raw.params)),
                    routingID: routingID, keyID: keyID), routingID: routingID)
        }
        // A big write with a preparation (a batchInsert of thousands of rows) is not parsed here either:
        // only its envelope is read, and its params are parsed by its preparation, on the reader pool.
        // The transport thread moves on at once: a save of another session behind it is not held up.
        if payload.count >= Self.preparedMessage, let raw = RawRequest(payload),
            handlers[raw.method]?.prepareRawWrite != nil
        {
            return run(
                request(
                    id: raw.id, method: raw.method, input: .unparsed(RawParams(bytes: payload, range: raw.params)),
                    routingID: routingID, keyID: keyID), routingID: routingID)
        }
        let json: JSONValue
        do {
            json = try JSONParser.parse(payload)
        } catch {
            let rpcError = RPCError.messageParseError(reason: error.reason, offset: error.offset)
            return send(MessageEncoder.response(id: nil, error: rpcError), to: routingID)
        }
        if case .array(let elements) = json {
            return receiveBatch(elements, from: routingID, keyID: keyID)
        }
        run(classify(json, from: routingID, keyID: keyID), routingID: routingID, moreWaiting: moreWaiting)
    }

    /// What a handler runs on: parsed params, or the raw bytes of a large request.
    fileprivate enum Input: Sendable {
        case parsed(JSONValue?)
        case raw(RawParams)
        /// A write's params left unparsed for its preparation (``Handler/prepareRawWrite``).
        case unparsed(RawParams)
        /// A write whose params are decoded and checked ahead of its turn on the writer;
        /// `parsesMessage` when its preparation parses the params too (from ``unparsed(_:)``).
        case prepared(WritePreparation, parsesMessage: Bool)
    }

    fileprivate enum Step {
        case respond([UInt8])
        case run(RequestID, String, Input, Handler, AuthorizedKey?)
        case none
    }

    /// Answers a step at once, or runs it where its ``Execution`` says.
    private func run(_ step: Step, routingID: [UInt8], moreWaiting: Bool = false) {
        switch step {
        case .respond(let bytes):
            send(bytes, to: routingID)
        case .run(let id, let method, let input, let handler, let key):
            // Registered now, not when a worker picks it up: a $/cancelRequest for a
            // request still queued behind others must find it.
            let limit = configuration.maxInFlightPerSession
            guard let cancellation = sessions.begin(id, routingID: routingID, limit: limit) else {
                let error = RPCError.overloaded(
                    "this session already has \(limit) requests in flight (--max-in-flight-per-session); wait for answers before sending more",
                    limit: "maxInFlightPerSession", value: limit)
                return send(MessageEncoder.response(id: id, error: error), to: routingID)
            }
            let run: @Sendable () -> Void = { [self] in
                send(
                    execute(
                        id: id, method: method, input: input, handler: handler, routingID: routingID, key: key,
                        cancellation: cancellation), to: routingID)
            }
            switch handler.execution {
            case .inline: run()
            case .read: readers.async(execute: run)
            case .ordered:
                readers.async { [self] in
                    executeOrdered(
                        id: id, method: method, input: input, handler: handler, routingID: routingID, key: key,
                        cancellation: cancellation
                    ) { [self] in send($0, to: routingID) }
                }
            case .write:
                let input = prepareAhead(
                    input, handler: handler, id: id, routingID: routingID, key: key, cancellation: cancellation)
                var entry = WriteQueue.Entry(
                    groupable: handler.groupable,
                    run: { [self] group in
                        // No response slot: a write answers only through the lane, after its notifications.
                        var bytes: [UInt8] = []
                        stats.measureWrite {
                            let recorded = store.recordedTransactions
                            bytes = execute(
                                id: id, method: method, input: input, handler: handler, routingID: routingID,
                                key: key, cancellation: cancellation, writeGroup: group)
                            return store.recordedTransactions > recorded
                        }
                        return bytes
                    },
                    send: { [self] in send($0, to: routingID) },
                    failure: { MessageEncoder.response(id: id, error: $0) })
                entry.session = routingID
                if case .prepared(let preparation, _) = input { entry.isReady = { preparation.isFinished } }
                stats.writeQueued()
                // A save finding the writer idle, with nothing behind it, commits on this thread and
                // is published here when the lane is idle: no hand-off to the writer and back, and its
                // deltas and answer go straight to the socket. Not when publishing it would read the
                // store (the transport thread must not wait for readers), nor in a cluster (nor for
                // PostgreSQL). Should a save turn out to need a snapshot after all (too large for
                // row images, or the model just changed), the wait is for the lane's few readers.
                writes.enqueue(
                    entry, subscriber: self,
                    runHereIfIdle: handler.groupable && !moreWaiting && publishesWithoutReading && !store.isReplicated)
            }
        case .none:
            break
        }
    }

    /// Starts the part of a write that needs no writer on the reader pool, if its handler has one
    /// (``WritePreparation``); the write then runs what it prepared.
    private func prepareAhead(
        _ input: Input, handler: Handler, id: RequestID, routingID: [UInt8], key: AuthorizedKey?,
        cancellation: Cancellation
    ) -> Input {
        let context = RequestContext(
            service: self, routingID: routingID, requestID: id, cancellation: cancellation,
            view: view(for: handler, key: key))
        let preparation: WritePreparation
        var parsesMessage = false
        switch input {
        case .parsed(let params) where handler.prepareWrite != nil:
            preparation = handler.prepareWrite!(params, context)
        case .unparsed(let params) where handler.prepareRawWrite != nil:
            preparation = handler.prepareRawWrite!(params, context)
            parsesMessage = true
        default:
            return input
        }
        readers.async { [self] in
            preparation.runAhead()
            // The writer skipped it while it was not ready: its turn may have passed.
            writes.wake(self)
        }
        return .prepared(preparation, parsesMessage: parsesMessage)
    }

    private func classify(_ json: JSONValue, from routingID: [UInt8], keyID: String?) -> Step {
        let message: Message
        do {
            message = try Message.decode(json)
        } catch {
            return .respond(MessageEncoder.response(id: error.id, error: error.error))
        }
        switch message {
        case .request(let id, let method, let params):
            return request(id: id, method: method, input: .parsed(params), routingID: routingID, keyID: keyID)
        case .notification(let method, let params):
            if let keyID, keys?.key(keyID) == nil { return .none }
            if method == CancelRequest.name, let params,
                let cancel = try? JSONCoding.decode(CancelRequest.Parameters.self, from: params)
            {
                sessions.cancel(cancel.id, routingID: routingID)
            }
            return .none
        case .result, .error:
            return .none
        }
    }

    /// Checks a request (its method, the key's role, the session, the limits) and makes it a step to run.
    private func request(id: RequestID, method: String, input: Input, routingID: [UInt8], keyID: String?) -> Step {
        guard let handler = handlers[method] else {
            return .respond(
                MessageEncoder.response(
                    id: id,
                    error: RPCError(
                        code: .methodNotFound, message: "method '\(method)' not found",
                        data: ["method": .string(method)])))
        }
        var key: AuthorizedKey?
        if let keyID {
            switch authorize(method, keyID: keyID, routingID: routingID) {
            case .success(let authorized): key = authorized
            case .failure(let error): return .respond(MessageEncoder.response(id: id, error: error))
            }
        }
        if !Self.preSession.contains(method) && !sessions.hasSession(routingID) {
            return .respond(
                MessageEncoder.response(
                    id: id,
                    error: RPCError(
                        code: .serverNotInitialized, message: "'\(method)' before initialize: send initialize first")))
        }
        if let refusal = admit(method, routingID: routingID) {
            return .respond(MessageEncoder.response(id: id, error: refusal))
        }
        return .run(id, method, input, handler, key)
    }

    /// Runs one request and returns its response bytes.
    private func execute(
        id: RequestID, method: String, input: Input, handler: Handler, routingID: [UInt8],
        key: AuthorizedKey?, cancellation: Cancellation? = nil, writeGroup: WriteGroup? = nil
    ) -> [UInt8] {
        let cancellation = cancellation ?? sessions.begin(id, routingID: routingID)
        defer { sessions.end(id, routingID: routingID) }
        if case .prepared(let preparation, parsesMessage: true) = input, case .failure(let error) = preparation.take(),
            error.code == .parseError
        {
            // The message was not JSON after all, found by the preparation that parsed its params:
            // answered as if found on arrival.
            return MessageEncoder.response(id: nil, error: error)
        }
        var context = RequestContext(
            service: self, routingID: routingID, requestID: id, cancellation: cancellation,
            view: view(for: handler, key: key))
        context.writeGroup = writeGroup
        return response(
            id: id, method: method,
            Result { () throws(RPCError) -> [UInt8] in
                if isStopping && handler.execution != .inline {
                    throw RPCError(code: .serverCancelled, message: "the server is shutting down")
                }
                switch input {
                case .parsed(let params): return try handler.run(params, context)
                case .raw(let params): return try handler.runRaw!(params, context)
                case .unparsed(let params): return try handler.run(try params.parse(), context)
                case .prepared(let preparation, _): return try preparation.take().get().run(context)
                }
            })
    }

    /// Prepares an ``Execution/ordered`` request (on the calling reader) and
    /// hands its response bytes to `answer` once the publish lane answered it.
    private func executeOrdered(
        id: RequestID, method: String, input: Input, handler: Handler, routingID: [UInt8], key: AuthorizedKey?,
        cancellation: Cancellation? = nil, answer: @escaping @Sendable ([UInt8]) -> Void
    ) {
        let cancellation = cancellation ?? sessions.begin(id, routingID: routingID)
        let context = RequestContext(
            service: self, routingID: routingID, requestID: id, cancellation: cancellation,
            view: view(for: handler, key: key))
        let reply = Reply { [self] result in
            sessions.end(id, routingID: routingID)
            answer(response(id: id, method: method, result))
        }
        do throws(RPCError) {
            if isStopping { throw RPCError(code: .serverCancelled, message: "the server is shutting down") }
            guard case .parsed(let params) = input, let runOrdered = handler.runOrdered else {
                throw .internalError("'\(method)' has no ordered handler for its params")
            }
            try runOrdered(params, context, reply)
        } catch {
            reply(.failure(error))
        }
    }

    /// The response to request `id`: its result, or its error (an internal one is logged too).
    private func response(id: RequestID, method: String, _ result: Result<[UInt8], RPCError>) -> [UInt8] {
        switch result {
        case .success(let json):
            return MessageEncoder.response(id: id, resultJSON: json)
        case .failure(let error):
            if error.code == .internalError { logger.error("\(method) failed: \(error.message)") }
            return MessageEncoder.response(id: id, error: error)
        }
    }

    private func receiveBatch(_ elements: [JSONValue], from routingID: [UInt8], keyID: String?) {
        guard !elements.isEmpty else {
            let error = RPCError(code: .invalidRequest, message: "an empty batch is not a valid request")
            return send(MessageEncoder.response(id: nil, error: error), to: routingID)
        }
        let classified = elements.map { classify($0, from: routingID, keyID: keyID) }
        let needsWriter = classified.contains {
            if case .run(_, _, _, let handler, _) = $0 { handler.execution == .write } else { false }
        }
        // A batch that writes publishes its commits only once it ends, after its other requests
        // ran: answers that wait for every commit so far to be published (§7) cannot be among them.
        let steps = classified.map { step in
            guard needsWriter, case .run(let id, let method, _, let handler, _) = step, handler.waitsForCommits
            else { return step }
            return .respond(
                MessageEncoder.response(
                    id: id,
                    error: RPCError(
                        code: .invalidRequest,
                        message:
                            "'\(method)' cannot share a JSON-RPC batch with writes: its answer is ordered with the deltas the writes make; send it on its own",
                        data: ["method": .string(method)])))
        }
        // The answers of the batch's requests, as one array (nil when none answers).
        let answer: @Sendable () -> [UInt8]? = { [self] in
            var responses: [[UInt8]] = []
            for step in steps {
                switch step {
                case .respond(let bytes): responses.append(bytes)
                case .run(let id, let method, let input, let handler, let key) where handler.execution == .ordered:
                    // Answered from the lane: the batch waits for it (never on the writer for a
                    // results read, which a batch that writes cannot carry).
                    let answered = Mutex<[UInt8]>([])
                    let done = DispatchSemaphore(value: 0)
                    executeOrdered(
                        id: id, method: method, input: input, handler: handler, routingID: routingID, key: key
                    ) { bytes in
                        answered.withLock { $0 = bytes }
                        done.signal()
                    }
                    done.wait()
                    responses.append(answered.withLock { $0 })
                case .run(let id, let method, let input, let handler, let key):
                    responses.append(
                        execute(
                            id: id, method: method, input: input, handler: handler, routingID: routingID, key: key))
                case .none: break
                }
            }
            guard !responses.isEmpty else { return nil }
            var writer = JSONWriter()
            writer.writeRaw("[")
            for (index, response) in responses.enumerated() {
                if index > 0 { writer.writeRaw(",") }
                writer.writeRaw(response)
            }
            writer.writeRaw("]")
            return writer.bytes
        }
        guard needsWriter else {
            return readers.async { [self] in
                if let bytes = answer() { send(bytes, to: routingID) }
            }
        }
        stats.writeQueued()
        let entry = WriteQueue.Entry(
            groupable: false,
            run: { [self] _ in
                var bytes: [UInt8]?
                stats.measureWrite {
                    let recorded = store.recordedTransactions
                    bytes = answer()
                    return store.recordedTransactions > recorded
                }
                return bytes
            },
            send: { [self] in send($0, to: routingID) }, failure: { _ in [] })
        writes.enqueue(entry, subscriber: self)
    }

    /// Applies the session limit; the error to answer with, or `nil` to go on (the subscription
    /// quota is the results engine's, which owns the subscriptions).
    private func admit(_ method: String, routingID: [UInt8]) -> RPCError? {
        switch method {
        case Initialize.name:
            let limit = configuration.maxSessions
            guard sessions.session(for: routingID) == nil, sessions.count >= limit else { return nil }
            // Lowered at start-up by the open-file limit: the message says so, or raising --max-sessions looks like the fix.
            let lowered = configuration.requestedMaxSessions.map {
                ", lowered from \($0) by the open-file limit of \(configuration.openFileLimit ?? 0)"
            }
            logger.warning("refused a session: \(limit) sessions are open (--max-sessions\(lowered ?? ""))")
            return .overloaded(
                "the daemon already serves \(limit) sessions (--max-sessions\(lowered ?? "")); try again later",
                limit: "maxSessions", value: limit)
        default:
            return nil
        }
    }

    /// Checks `method` against the role of the key `keyID` as the key file says now.
    ///
    /// A key no longer listed (removed, then SIGHUP) closes its session and is refused.
    private func authorize(_ method: String, keyID: String, routingID: [UInt8]) -> Result<AuthorizedKey, RPCError> {
        guard let key = keys?.key(keyID) else {
            closeSession(routingID, reason: "its key was revoked")
            return .failure(
                RPCError(
                    code: .forbidden,
                    message:
                        "the key \(keyID) is no longer authorized (removed from the authorized keys); '\(method)' refused",
                    data: ["method": .string(method)]))
        }
        guard key.role.allows(method) else {
            let needed = Role.required(for: method)
            return .failure(
                RPCError(
                    code: .forbidden,
                    message:
                        "'\(method)' is forbidden for role '\(key.role.rawValue)' (key '\(key.name)'); it needs role '\(needed.rawValue)'",
                    data: [
                        "method": .string(method), "role": .string(key.role.rawValue),
                        "required": .string(needed.rawValue), "key": .string(key.name),
                    ]))
        }
        return .success(key)
    }

    /// The store as `key` sees it through `handler`, built once for each request (DESIGN.md §2):
    /// scoped unless the method's registration says why not (``Scoping``).
    private func view(for handler: Handler, key: AuthorizedKey?) -> StoreView {
        StoreView(store: store, key: key, scoping: handler.scoping)
    }

    /// Waits until every queued write and read has finished.
    func drain() {
        parser.sync {}
        // A write waiting for its preparation runs once the preparation (on the readers) is done.
        repeat {
            writes.sync {}
            writes.lane.drain()
            readers.sync(flags: .barrier) {}
        } while writes.depth > 0
        writes.sync {}
        writes.lane.drain()
    }
}
