/// One JSON-RPC 2.0 message, as classified from its JSON.
public enum Message: Sendable, Equatable {
    /// A call that expects a response.
    case request(id: RequestID, method: String, params: JSONValue?)
    /// A call that expects none.
    case notification(method: String, params: JSONValue?)
    /// A successful response.
    case result(id: RequestID, result: JSONValue)
    /// An error response; `id` is `nil` when the request's id could not be read.
    case error(id: RequestID?, error: RPCError)

    /// Classifies one message object, strictly: `jsonrpc` must be `"2.0"`,
    /// ids strings or integers, params an object or array.
    ///
    /// - Throws: a -32600 ``RPCError``; when the id could be read, `id` carries it
    ///   so that the error response can echo it.
    public static func decode(_ json: JSONValue) throws(InvalidMessage) -> Message {
        guard case .object(let members) = json else {
            throw InvalidMessage(
                id: nil,
                error: RPCError(code: .invalidRequest, message: "a message must be a JSON object, got \(json.typeName)")
            )
        }
        var id: RequestID?
        if let rawID = members["id"], !rawID.isNull {
            guard let parsed = RequestID(json: rawID) else {
                throw InvalidMessage(
                    id: nil,
                    error: RPCError(
                        code: .invalidRequest, message: "id must be a string or an integer, got \(rawID.excerpt())"))
            }
            id = parsed
        }
        func invalid(_ message: String) -> InvalidMessage {
            InvalidMessage(id: id, error: RPCError(code: .invalidRequest, message: message))
        }
        guard members["jsonrpc"] == "2.0" else {
            throw invalid("jsonrpc must be \"2.0\", got \(members["jsonrpc"]?.excerpt() ?? "nothing")")
        }
        if let methodValue = members["method"] {
            guard case .string(let method) = methodValue, !method.isEmpty else {
                throw invalid("method must be a non-empty string, got \(methodValue.excerpt())")
            }
            let params = members["params"]
            switch params {
            case nil, .object?, .array?: break
            case let other?: throw invalid("params must be an object or an array, got \(other.typeName)")
            }
            if let id { return .request(id: id, method: method, params: params) }
            if members["id"] != nil {
                throw invalid("id must be a string or an integer, got null")
            }
            return .notification(method: method, params: params)
        }
        if let result = members["result"] {
            guard let id else { throw invalid("a response needs an id") }
            return .result(id: id, result: result)
        }
        if let errorValue = members["error"] {
            guard let error = try? JSONCoding.decode(RPCError.self, from: errorValue) else {
                throw invalid("error must be an object with code and message")
            }
            return .error(id: id, error: error)
        }
        throw invalid("a message needs method, result or error")
    }

    /// The message's JSON.
    public var json: JSONValue {
        switch self {
        case .request(let id, let method, let params):
            var members: [String: JSONValue] = ["jsonrpc": "2.0", "id": id.json, "method": .string(method)]
            if let params { members["params"] = params }
            return .object(members)
        case .notification(let method, let params):
            var members: [String: JSONValue] = ["jsonrpc": "2.0", "method": .string(method)]
            if let params { members["params"] = params }
            return .object(members)
        case .result(let id, let result):
            return ["jsonrpc": "2.0", "id": id.json, "result": result]
        case .error(let id, let error):
            return ["jsonrpc": "2.0", "id": id?.json ?? .null, "error": (try? JSONCoding.encode(error)) ?? .null]
        }
    }

    /// The message's bytes.
    public var encoded: [UInt8] { JSONWriter.encode(json) }
}

/// A message that is not valid JSON-RPC, with the id to answer it by, if one could be read.
public struct InvalidMessage: Error, Sendable {
    /// The request's id, when it could be read.
    public var id: RequestID?
    /// The -32600 error to answer with.
    public var error: RPCError
}

/// Builds the bytes of responses and notifications without a detour through
/// ``JSONValue`` for the payload, which is often large (fetch results).
public enum MessageEncoder {
    /// A success response whose `result` is the already-encoded `resultJSON`.
    public static func response(id: RequestID, resultJSON: [UInt8]) -> [UInt8] {
        var writer = JSONWriter(capacity: resultJSON.count + 48)
        writer.writeRaw("{\"id\":")
        writer.write(id.json)
        writer.writeRaw(",\"jsonrpc\":\"2.0\",\"result\":")
        writer.writeRaw(resultJSON)
        writer.writeRaw("}")
        return writer.bytes
    }

    /// An error response.
    public static func response(id: RequestID?, error: RPCError) -> [UInt8] {
        Message.error(id: id, error: error).encoded
    }

    /// A notification whose `params` are the already-encoded `paramsJSON`.
    public static func notification(method: String, paramsJSON: [UInt8]) -> [UInt8] {
        var writer = JSONWriter(capacity: paramsJSON.count + method.utf8.count + 40)
        writer.writeRaw("{\"jsonrpc\":\"2.0\",\"method\":")
        writer.write(method)
        writer.writeRaw(",\"params\":")
        writer.writeRaw(paramsJSON)
        writer.writeRaw("}")
        return writer.bytes
    }
}
