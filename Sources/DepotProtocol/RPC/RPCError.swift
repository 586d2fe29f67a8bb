/// A JSON-RPC error object, and the Swift error that carries one.
///
/// Every layer throws this so that the message that reaches the client names
/// what was wrong and with which value (DESIGN.md §10).
public struct RPCError: Error, Codable, Hashable, Sendable, CustomStringConvertible {
    /// The error code.
    public var code: ErrorCode
    /// A sentence for people: what was wrong, and with which value.
    public var message: String
    /// Structured detail for programs.
    public var data: JSONValue?

    /// Creates an error.
    public init(code: ErrorCode, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public var description: String { "\(message) (\(code.rawValue))" }

    /// -32602, with `data.field` naming the bad field.
    public static func invalidParams(_ message: String, field: String) -> RPCError {
        RPCError(code: .invalidParams, message: message, data: ["field": .string(field)])
    }

    /// -32013 for something that does not exist.
    public static func notFound(_ message: String, id: String? = nil) -> RPCError {
        RPCError(code: .notFound, message: message, data: id.map { ["id": .string($0)] })
    }

    /// -32603 for a failure that is the daemon's fault.
    public static func internalError(_ message: String) -> RPCError {
        RPCError(code: .internalError, message: message)
    }

    /// -32800: the client cancelled the request.
    public static let cancelled = RPCError(code: .requestCancelled, message: "the request was cancelled by the client")
}
