import DepotProtocol

/// Where the answer of an ``Execution/ordered`` request goes: the publish-lane
/// job that computes it calls the reply once, so the answer takes its place in
/// the session's stream between two notifications, never among them.
struct Reply: Sendable {
    private let deliver: @Sendable (Result<[UInt8], RPCError>) -> Void

    /// A reply that hands the result JSON (or the error) to `deliver`.
    init(_ deliver: @escaping @Sendable (Result<[UInt8], RPCError>) -> Void) {
        self.deliver = deliver
    }

    /// Answers with `result`: the result's JSON, or the error.
    func callAsFunction(_ result: Result<[UInt8], RPCError>) { deliver(result) }
}
