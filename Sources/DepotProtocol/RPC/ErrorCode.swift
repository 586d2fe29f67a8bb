/// The error codes of DESIGN.md §10: JSON-RPC's, LSP's and Depot's own.
public struct ErrorCode: RawRepresentable, Hashable, Codable, Sendable, CustomStringConvertible {
    public let rawValue: Int

    /// Creates a code from its number.
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Invalid JSON was received.
    public static let parseError = ErrorCode(rawValue: -32700)
    /// The JSON is not a valid request object.
    public static let invalidRequest = ErrorCode(rawValue: -32600)
    /// The method does not exist.
    public static let methodNotFound = ErrorCode(rawValue: -32601)
    /// The params are invalid; `data.field` names the bad one.
    public static let invalidParams = ErrorCode(rawValue: -32602)
    /// An internal error of the daemon.
    public static let internalError = ErrorCode(rawValue: -32603)
    /// A request other than `initialize` or `ping` came before `initialize`.
    public static let serverNotInitialized = ErrorCode(rawValue: -32002)
    /// The client cancelled the request with `$/cancelRequest`.
    public static let requestCancelled = ErrorCode(rawValue: -32800)
    /// The server cancelled the request (shutting down).
    public static let serverCancelled = ErrorCode(rawValue: -32802)
    /// A save failed validation; `data.errors` lists every problem.
    public static let validationFailed = ErrorCode(rawValue: -32010)
    /// A save violated a uniqueness constraint.
    public static let uniqueConstraint = ErrorCode(rawValue: -32011)
    /// A save conflicted with newer store values under the `error` merge policy.
    public static let mergeConflict = ErrorCode(rawValue: -32012)
    /// An object or other named thing does not exist.
    public static let notFound = ErrorCode(rawValue: -32013)
    /// A predicate could not be parsed; `data` has `position` and `expected`.
    public static let predicateSyntax = ErrorCode(rawValue: -32014)
    /// A `deny` delete rule refused a delete.
    public static let deleteDenied = ErrorCode(rawValue: -32015)
    /// A model redefinition needs more than a lightweight migration.
    public static let migrationRefused = ErrorCode(rawValue: -32016)
    /// The daemon is overloaded.
    public static let overloaded = ErrorCode(rawValue: -32017)
    /// The client key's role does not allow the method (or the key was revoked).
    public static let forbidden = ErrorCode(rawValue: -32018)

    public var description: String { String(rawValue) }

    /// Decodes the plain number.
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(Int.self))
    }

    /// Encodes the plain number.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
