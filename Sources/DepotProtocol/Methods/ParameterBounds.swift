/// Params whose numbers have an allowed range: the bounds `proto/` states.
///
/// The server checks them right after decoding, before any work, so that
/// `store/fetch {batchSize: -1}` is -32602 naming `params.batchSize`, the value
/// and the range, rather than a fetch that does something odd.
public protocol BoundedParameters {
    /// Throws -32602 for the first member out of its range.
    ///
    /// - Parameter field: the path of these params in the message, e.g. `params`.
    func checkBounds(field: String) throws(RPCError)
}

extension RPCError {
    /// -32602 for a number out of its range: `data` has `field`, `value` and `allowed`.
    public static func outOfRange(_ field: String, value: Int64, allowed: String) -> RPCError {
        RPCError(
            code: .invalidParams, message: "\(field) is \(value); allowed: \(allowed)",
            data: ["field": .string(field), "value": .int(value), "allowed": .string(allowed)])
    }
}

extension RPCError {
    /// -32017: a limit of the daemon is reached; `data` names the limit and its value.
    public static func overloaded(_ message: String, limit: String, value: Int) -> RPCError {
        RPCError(code: .overloaded, message: message, data: ["limit": .string(limit), "value": .int(Int64(value))])
    }
}

/// Checks `value` (when present) against `minimum` and `maximum`.
@inlinable
func require<I: BinaryInteger>(
    _ value: I?, _ field: @autoclosure () -> String, atLeast minimum: Int64, atMost maximum: Int64 = .max
) throws(RPCError) {
    guard let value else { return }
    let wide = Int64(truncatingIfNeeded: value)
    guard wide < minimum || wide > maximum else { return }
    let allowed = maximum == .max ? "an integer >= \(minimum)" : "an integer from \(minimum) to \(maximum)"
    throw .outOfRange(field(), value: wide, allowed: allowed)
}

extension FetchRequest: BoundedParameters {
    /// `limit` and `offset` at least 0, `batchSize` at least 1.
    public func checkBounds(field: String) throws(RPCError) {
        try require(limit, "\(field).limit", atLeast: 0)
        try require(offset, "\(field).offset", atLeast: 0)
        try require(batchSize, "\(field).batchSize", atLeast: 1)
    }
}

extension ResultsSubscribe.Parameters: BoundedParameters {
    /// The request's bounds, `coalesceMs` from 0 to 60,000, and `resume.transaction` at least 0.
    public func checkBounds(field: String) throws(RPCError) {
        try request.checkBounds(field: "\(field).request")
        try require(coalesceMs, "\(field).coalesceMs", atLeast: 0, atMost: 60_000)
        try require(resume?.transaction, "\(field).resume.transaction", atLeast: 0)
    }
}

extension ServerStats.Parameters: BoundedParameters {
    /// `sessionLimit` from 1 to ``largestSessionLimit``.
    public func checkBounds(field: String) throws(RPCError) {
        try require(sessionLimit, "\(field).sessionLimit", atLeast: 1, atMost: Int64(Self.largestSessionLimit))
    }
}

extension ResultsObjects.Parameters: BoundedParameters {
    /// `offset` and `length` at least 0.
    public func checkBounds(field: String) throws(RPCError) {
        try require(offset, "\(field).offset", atLeast: 0)
        try require(length, "\(field).length", atLeast: 0)
    }
}

extension StoreHistory.Parameters: BoundedParameters {
    /// `since` at least 0, `limit` at least 1.
    public func checkBounds(field: String) throws(RPCError) {
        try require(since, "\(field).since", atLeast: 0)
        try require(limit, "\(field).limit", atLeast: 1)
    }
}
