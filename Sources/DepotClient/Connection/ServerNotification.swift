import DepotProtocol

/// A notification the server pushed: `results/didChange`, `store/didSave`, `$/progress`, ….
public struct ServerNotification: Sendable, Hashable {
    /// The method name.
    public var method: String
    /// The params (an empty object when the server sent none).
    public var params: JSONValue

    /// Creates a notification.
    public init(method: String, params: JSONValue) {
        self.method = method
        self.params = params
    }

    /// The params as `N`'s type when this is an `N` notification, else `nil`.
    public func decode<N: NotificationMethod>(_ method: N.Type) -> N.Parameters? {
        guard self.method == N.name else { return nil }
        return try? JSONCoding.decode(N.Parameters.self, from: params)
    }
}
