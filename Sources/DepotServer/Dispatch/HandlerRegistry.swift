import DepotProtocol

/// Where a handler runs.
enum Execution: Sendable {
    /// On the transport thread: only for work that never blocks (ping, session bookkeeping).
    case inline
    /// On the concurrent reader pool: fetches and other reads.
    case read
    /// On the single serial writer: anything that commits, so that
    /// notifications of transaction T go out before those of T+1.
    case write
    /// Prepared on the reader pool, answered from a publish-lane job through a
    /// ``Reply``: requests whose answers take their place among the session's
    /// notifications (DESIGN.md §7: `results/subscribe`, `objects`, `snapshot`,
    /// `unsubscribe`). A JSON-RPC batch that writes cannot carry them.
    case ordered
}

/// How a method treats the requesting key's row-level scope (DESIGN.md §2): every
/// registration declares one, and the dispatcher builds the handler's
/// ``StoreView`` from it. `MethodScopingTests` walks every registered method.
enum Scoping: Sendable, Equatable {
    /// Reads and writes rows only through the key's scoped view of the store.
    case scoped
    /// Reads no row of the store (session bookkeeping): `reason` says why no scope applies.
    case unscoped(reason: String)
    /// Needs role `admin` (``Role/required(for:)``) and works on the whole store, not on rows
    /// a scope could narrow (the model, caches, server figures): `reason` says what it touches.
    case adminOnly(reason: String)
}

/// A method's handler with its params decoded and its result encoded.
struct Handler: Sendable {
    let execution: Execution
    /// How it treats the key's scope: the view of the store its ``RequestContext`` holds.
    let scoping: Scoping
    let run: @Sendable (JSONValue?, RequestContext) throws(RPCError) -> [UInt8]
    /// For methods whose large requests are read lazily (``RawRequest``): runs on the raw params.
    var runRaw: (@Sendable (RawParams, RequestContext) throws(RPCError) -> [UInt8])?
    /// Whether queued requests of this write may commit together (group commit, ``WriteQueue``).
    var groupable = false
    /// For ``Execution/ordered`` methods: prepares the request and hands its answer to the reply, later.
    var runOrdered: (@Sendable (JSONValue?, RequestContext, Reply) throws(RPCError) -> Void)?
    /// For writes with a part that needs no writer (``HandlerRegistry/registerPrepared(_:prepare:write:raw:)``):
    /// makes the preparation of one request, run ahead on the reader pool.
    var prepareWrite: (@Sendable (JSONValue?, RequestContext) -> WritePreparation)?
    /// Like ``prepareWrite``, from the params left unparsed: the preparation parses them too, so that
    /// a big request is never parsed on the transport thread.
    var prepareRawWrite: (@Sendable (RawParams, RequestContext) -> WritePreparation)?
    /// Whether its answer waits for every commit so far to be published (results reads): a JSON-RPC
    /// batch that writes cannot carry it, since the batch's own commits are published only once it ends.
    var waitsForCommits = false
}

/// A request's params left unparsed: the whole message and the params object's range in it.
struct RawParams: Sendable {
    /// The message.
    let bytes: [UInt8]
    /// Where the params object is.
    let range: Range<Int>

    /// Parses the params object; a malformed one is the message's parse error (-32700, its
    /// offset in the whole message), answered with a null id like any message that is not JSON.
    func parse() throws(RPCError) -> JSONValue {
        do {
            return try JSONParser.parse(bytes[range])
        } catch {
            throw .messageParseError(reason: error.reason, offset: range.lowerBound + error.offset)
        }
    }
}

extension RPCError {
    /// The error for a message that is not JSON (answered with a null id, JSON-RPC 2.0 §5.1).
    static func messageParseError(reason: String, offset: Int) -> RPCError {
        RPCError(
            code: .parseError, message: "parse error: \(reason) at byte \(offset)",
            data: ["offset": .int(Int64(offset))])
    }
}

/// The methods the server answers, by name, each typed by its ``Method``.
struct HandlerRegistry: Sendable {
    private(set) var handlers: [String: Handler] = [:]

    /// Registers `body` for `method`; params are decoded before and the result encoded after.
    mutating func register<M: Method>(
        _ method: M.Type, _ execution: Execution, _ scoping: Scoping,
        _ body: @escaping @Sendable (M.Parameters, RequestContext) throws(RPCError) -> M.Result
    ) {
        handlers[M.name] = Handler(execution: execution, scoping: scoping) { (params, context) throws(RPCError) in
            let decoded = try Self.decode(M.Parameters.self, from: params)
            return try JSONCoding.encodeBytes(try body(decoded, context))
        }
    }

    /// Registers a handler that writes its own result bytes (large results, or small ones on a hot path).
    mutating func registerRaw<M: Method>(
        _ method: M.Type, _ execution: Execution, _ scoping: Scoping,
        _ body: @escaping @Sendable (M.Parameters, RequestContext) throws(RPCError) -> [UInt8]
    ) {
        handlers[M.name] = Handler(execution: execution, scoping: scoping) { (params, context) throws(RPCError) in
            try body(try Self.decode(M.Parameters.self, from: params), context)
        }
    }

    /// Registers `body` for `method`, and `raw` for large requests of it read
    /// lazily (``RawRequest``): both end in the same result type.
    mutating func register<M: Method>(
        _ method: M.Type, _ execution: Execution, _ scoping: Scoping,
        _ body: @escaping @Sendable (M.Parameters, RequestContext) throws(RPCError) -> M.Result,
        raw: @escaping @Sendable (RawParams, RequestContext) throws(RPCError) -> M.Result
    ) {
        register(method, execution, scoping, body)
        handlers[M.name]?.runRaw = { (params, context) throws(RPCError) in
            try JSONCoding.encodeBytes(try raw(params, context))
        }
    }

    /// Registers a ``Execution/write`` `method` in two parts: `prepare` decodes
    /// and checks what needs no writer, on the reader pool ahead of the write's
    /// turn (``WritePreparation``); `write` runs on the writer. In a JSON-RPC
    /// batch both run on the writer, one after the other. `raw` serves large
    /// requests read lazily, on the writer.
    mutating func registerPrepared<M: Method, Prepared: Sendable>(
        _ method: M.Type, _ scoping: Scoping,
        prepare: @escaping @Sendable (M.Parameters, RequestContext) throws(RPCError) -> Prepared,
        write: @escaping @Sendable (Prepared, RequestContext) throws(RPCError) -> M.Result,
        raw: @escaping @Sendable (RawParams, RequestContext) throws(RPCError) -> M.Result
    ) {
        register(
            method, .write, scoping,
            { (params, context) throws(RPCError) in try write(try prepare(params, context), context) }, raw: raw)
        @Sendable func prepared(_ params: JSONValue?, _ context: RequestContext) throws(RPCError) -> PreparedWrite {
            let prepared = try prepare(try Self.decode(M.Parameters.self, from: params), context)
            return PreparedWrite { (context) throws(RPCError) in
                try JSONCoding.encodeBytes(try write(prepared, context))
            }
        }
        handlers[M.name]?.prepareWrite = { params, context in
            WritePreparation { Result { () throws(RPCError) in try prepared(params, context) } }
        }
        handlers[M.name]?.prepareRawWrite = { raw, context in
            WritePreparation { Result { () throws(RPCError) in try prepared(try raw.parse(), context) } }
        }
    }

    /// Registers `body` for the ``Execution/ordered`` `method`: it checks the
    /// params (a thrown error is the answer) and answers through the ``Reply``,
    /// from the publish-lane job that computes the answer.
    ///
    /// - Parameter waitsForCommits: whether its answer waits for every commit so far to be published.
    mutating func registerOrdered<M: Method>(
        _ method: M.Type, waitsForCommits: Bool, _ scoping: Scoping,
        _ body: @escaping @Sendable (M.Parameters, RequestContext, Reply) throws(RPCError) -> Void
    ) {
        var handler = Handler(execution: .ordered, scoping: scoping) { (_, _) throws(RPCError) in
            preconditionFailure("\(M.name) is answered through its reply")
        }
        handler.waitsForCommits = waitsForCommits
        handler.runOrdered = { (params, context, reply) throws(RPCError) in
            try body(try Self.decode(M.Parameters.self, from: params), context, reply)
        }
        handlers[M.name] = handler
    }

    /// Marks `method`'s requests as committing together when they queue up (``WriteQueue``).
    mutating func allowGroupCommit<M: Method>(_ method: M.Type) {
        handlers[M.name]?.groupable = true
    }

    /// The handler for `name`.
    subscript(name: String) -> Handler? { handlers[name] }

    /// The names of every registered method, sorted (announced in `initialize`'s capabilities).
    var methodNames: [String] { handlers.keys.sorted() }

    /// Decodes the params and checks their numbers' ranges (``BoundedParameters``).
    static func decode<P: Decodable>(_ type: P.Type, from params: JSONValue?) throws(RPCError) -> P {
        let decoded: P
        switch params {
        case nil: decoded = try JSONCoding.decode(P.self, from: .object([:]))
        case .object?: decoded = try JSONCoding.decode(P.self, from: params!)
        default:
            throw .invalidParams("params must be an object (named params), got \(params!.typeName)", field: "params")
        }
        if let bounded = decoded as? any BoundedParameters {
            try bounded.checkBounds(field: "params")
        }
        return decoded
    }
}
