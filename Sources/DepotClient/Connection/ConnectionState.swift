/// Where a ``DepotConnection``'s link to the daemon stands, for code that
/// shows it (an offline badge) or waits for it (``DepotConnection/connectionStates()``).
///
/// A daemon that stops and comes back takes the connection through
/// ``disconnected``, ``reconnecting`` (the socket is back and a new session
/// is being opened) and ``connected`` again; a session that expired or was
/// refused (-32002) goes through ``reconnecting`` only.
public enum ConnectionState: Sendable, Hashable {
    /// A session is open: calls are answered.
    case connected
    /// The link dropped: calls in flight failed with ``DepotClientError/connectionLost(method:)``,
    /// new ones wait for the link (or time out). ZeroMQ keeps trying to reconnect.
    case disconnected
    /// The link is back (or the session was lost) and a new session is being opened, with backoff.
    case reconnecting
}
