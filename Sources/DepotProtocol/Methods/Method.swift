/// A JSON-RPC method with typed params and result, as the MCP Swift SDK models them.
///
/// Dispatch on the server and `call` on the clients are generic over it, so a
/// method's shape is written once, here, for both sides.
public protocol Method: Sendable {
    /// The params' type.
    associatedtype Parameters: Codable & Sendable
    /// The result's type.
    associatedtype Result: Codable & Sendable
    /// The method's wire name, e.g. `store/fetch`.
    static var name: String { get }
}

/// A notification (no response) with typed params.
public protocol NotificationMethod: Sendable {
    /// The params' type.
    associatedtype Parameters: Codable & Sendable
    /// The notification's wire name, e.g. `results/didChange`.
    static var name: String { get }
}

/// Params or a result with no members: `{}`.
public struct Empty: Codable, Hashable, Sendable {
    /// Creates the empty value.
    public init() {}
}

/// A result that is JSON `null`.
public struct Null: Codable, Hashable, Sendable {
    /// Creates the null value.
    public init() {}
    /// Accepts anything: the value carries no information.
    public init(from decoder: any Decoder) throws {}
    /// Encodes `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encodeNil()
    }
}
