import DepotProtocol

/// A change in a ``DepotConnection``'s link to the daemon.
///
/// ZeroMQ reconnects the socket by itself when the daemon restarts, but the new
/// daemon knows nothing of the old session: its subscriptions and observers are
/// gone. The connection opens a new session and reports ``reconnected(_:)`` so
/// that whoever relied on session state (a ``FetchedResultsController``, an
/// ``ObjectContext`` that merges changes) sets it up again.
public enum ConnectionEvent: Sendable, Hashable {
    /// The link to the daemon dropped; calls in flight failed with
    /// ``DepotClientError/connectionLost(method:)``.
    case disconnected
    /// A new session is open (after a daemon restart, a dropped link or an
    /// expired session); subscriptions and observers must be registered again.
    case reconnected(Initialize.Result)
}
