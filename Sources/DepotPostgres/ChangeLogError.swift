import PostgresNIO

/// Why a change log operation failed.
public enum ChangeLogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A schema name that is not a plain lowercase SQL identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes).
    case invalidSchemaName(String)
    /// A connection URL that is not `postgresql://USER[:PASSWORD]@HOST[:PORT][/DATABASE][?schema=NAME]`.
    case invalidURL(String)
    /// A row of the log that does not decode (its changes are not JSON, say).
    case malformedEntry(transaction: Int64, reason: String)
    /// PostgreSQL refused a statement, or the connection to it failed or was lost.
    case database(String)

    /// A message for logs and for JSON-RPC errors (-32603).
    public var description: String {
        switch self {
        case .invalidSchemaName(let name): "invalid schema name '\(name)': use [a-z_][a-z0-9_]*"
        case .invalidURL(let url): "invalid PostgreSQL URL '\(url)'"
        case .malformedEntry(let transaction, let reason): "change log entry \(transaction) is malformed: \(reason)"
        case .database(let cause): "PostgreSQL: \(cause)"
        }
    }

    /// Wraps an error from PostgresNIO, naming the cause without the query's bound values.
    static func wrapping(_ error: any Error) -> ChangeLogError {
        if let error = error as? ChangeLogError { return error }
        if let transaction = error as? PostgresTransactionError {
            guard
                let cause = transaction.closureError ?? transaction.commitError ?? transaction.beginError
                    ?? transaction.rollbackError
            else { return .database("the transaction failed") }
            return wrapping(cause)
        }
        guard let error = error as? PSQLError else { return .database(String(describing: error)) }
        var cause = "\(error.code)"
        if let message = error.serverInfo?[.message] {
            cause += ": \(message)"
            if let state = error.serverInfo?[.sqlState] { cause += " (SQLSTATE \(state))" }
        } else if let underlying = error.underlying as? PSQLError {
            cause += ": \(underlying.code)"
            if let message = underlying.serverInfo?[.message] { cause += ": \(message)" }
        } else if let underlying = error.underlying {
            cause += ": \(underlying)"
        }
        return .database(cause)
    }
}

/// Runs `body`, turning whatever it throws into a `ChangeLogError`.
@discardableResult
func mappingErrors<Value>(
    isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> sending Value
) async throws(ChangeLogError) -> sending Value {
    do {
        return try await body()
    } catch {
        throw ChangeLogError.wrapping(error)
    }
}
