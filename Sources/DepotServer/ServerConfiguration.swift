import DepotProtocol
import DepotStore
import Foundation

/// How a ``DepotServer`` runs.
public struct ServerConfiguration: Sendable {
    /// The directory holding the database (created mode 0700).
    public var dataDirectory: URL
    /// Endpoints to bind; the ipc endpoint in the data directory when empty.
    public var endpoints: [String]
    /// Seconds between a client's messages at most; three silent intervals end a session.
    public var heartbeatInterval: Double
    /// The largest inbound message in bytes (`ZMQ_MAXMSGSIZE`).
    public var maxMessageSize: Int64
    /// Messages ZeroMQ queues per peer before the server's own backlog takes over.
    public var sendHighWaterMark: Int32
    /// Messages the server queues per session beyond ZeroMQ before a subscription overflows.
    public var sessionQueueLimit: Int
    /// The server's version string.
    public var version: String
    /// The most objects a plain `store/fetch` answers with (ids: ten times as many); more must be paged or streamed.
    public var maxFetchObjects: Int
    /// How long history keeps committed transactions.
    public var historyRetention: HistoryRetention
    /// The server's CURVE secret key (Z85, 40 characters). With ``authorizedKeysFile``,
    /// every `tcp://` endpoint is a CURVE server and only listed keys get in.
    public var curveSecretKey: String?
    /// The authorized-keys file: `<Z85 public key> <role> [name]` per line, `#` comments.
    /// Re-read by ``DepotServer/reloadAuthorizedKeys()`` (SIGHUP).
    public var authorizedKeysFile: String?
    /// The policy file (DESIGN.md §2, Row-level scopes): roles with per-entity read
    /// and write predicates that authorized-key lines may name. Re-read on SIGHUP.
    public var policyFile: String?
    /// The most sessions open at once; `initialize` beyond it is -32017.
    public var maxSessions = 1024
    /// What `--max-sessions` asked for, when the open-file limit lowered ``maxSessions`` below it.
    public var requestedMaxSessions: Int?
    /// The open-file limit (soft) the daemon runs with, as found at start-up.
    public var openFileLimit: Int?
    /// ZeroMQ I/O threads (`ZMQ_IO_THREADS`): one per two cores, from one to four, by default.
    public var ioThreads = ServerConfiguration.defaultIOThreads
    /// The most live subscriptions one session may hold; `results/subscribe` beyond it is -32017.
    public var maxSubscriptionsPerSession = 1000
    /// The most requests one session may have running or queued; more are -32017 at once.
    public var maxInFlightPerSession = 1000
    /// Seconds a read may run without producing a row before it is stopped with -32602
    /// (a SUBQUERY or predicate that would run away).
    public var maxQuerySeconds: Double = 30
    /// Entities to define at start-up, before anything is bound (`depotd --model`).
    public var model: [EntityDescription]?
    /// The cluster whose log the store writes through and follows (`depotd --store postgresql://…`);
    /// `nil` for the embedded SQLite store alone.
    public var replication: (any StoreReplication)?

    /// A configuration with Depot's defaults for `dataDirectory`.
    public init(
        dataDirectory: URL, endpoints: [String] = [], heartbeatInterval: Double = 10,
        maxMessageSize: Int64 = 16 << 20, sendHighWaterMark: Int32 = 10_000, sessionQueueLimit: Int = 10_000,
        version: String = depotVersion, maxFetchObjects: Int = 100_000,
        historyRetention: HistoryRetention = .count(100_000)
    ) {
        self.maxFetchObjects = maxFetchObjects
        self.historyRetention = historyRetention
        self.dataDirectory = dataDirectory
        self.endpoints = endpoints
        self.heartbeatInterval = heartbeatInterval
        self.maxMessageSize = maxMessageSize
        self.sendHighWaterMark = sendHighWaterMark
        self.sessionQueueLimit = sessionQueueLimit
        self.version = version
    }

    /// One ZeroMQ I/O thread per two cores, from one to four.
    public static var defaultIOThreads: Int { min(4, max(1, ProcessInfo.processInfo.activeProcessorCount / 2)) }

    /// The listen queue of each endpoint (`ZMQ_BACKLOG`): room for every session to reconnect at once.
    public var listenBacklog: Int { max(4096, maxSessions) }

    /// The default endpoint: `ipc://<data-dir>/depot.sock`.
    public var defaultEndpoint: String { "ipc://" + dataDirectory.appendingPathComponent("depot.sock").path }

    /// The endpoints actually bound.
    public var effectiveEndpoints: [String] { endpoints.isEmpty ? [defaultEndpoint] : endpoints }
}

/// Depot's version.
public let depotVersion = "0.1.0"

/// Why a configuration cannot start.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, for the person starting the daemon.
    public let description: String
}

extension ServerConfiguration {
    /// Refuses endpoints that would expose the store without authentication.
    ///
    /// A `tcp://` bind must be on loopback unless CURVE keys are configured.
    public func validate() throws(ConfigurationError) {
        if policyFile != nil && authorizedKeysFile == nil {
            throw ConfigurationError(
                description:
                    "--policy needs --authorized-keys: scopes belong to keys (the ipc:// endpoint is unscoped)")
        }
        guard (curveSecretKey == nil) == (authorizedKeysFile == nil) else {
            throw ConfigurationError(
                description:
                    "--curve-secret-key and --authorized-keys go together: the server needs its own key and the list of client keys"
            )
        }
        let secured = curveSecretKey != nil
        for endpoint in effectiveEndpoints {
            guard endpoint.hasPrefix("tcp://") else {
                guard endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("inproc://") else {
                    throw ConfigurationError(
                        description: "unsupported endpoint '\(endpoint)': use ipc://PATH or tcp://127.0.0.1:PORT")
                }
                continue
            }
            let hostPort = endpoint.dropFirst("tcp://".count)
            let host: Substring
            if hostPort.hasPrefix("[") {
                host = hostPort.dropFirst().prefix { $0 != "]" }
            } else {
                host = hostPort.prefix { $0 != ":" }
            }
            let port = hostPort.hasPrefix("[") ? hostPort.drop { $0 != "]" }.dropFirst() : hostPort.drop { $0 != ":" }
            guard port.hasPrefix(":"), port == ":*" || (UInt16(port.dropFirst()) != nil) else {
                throw ConfigurationError(
                    description:
                        "bad endpoint '\(endpoint)': the port must be a number from 0 to 65535 or *, as in tcp://127.0.0.1:5555"
                )
            }
            let loopback = host == "localhost" || host == "::1" || host.hasPrefix("127.")
            guard loopback || secured else {
                throw ConfigurationError(
                    description:
                        "refusing to listen on non-loopback '\(endpoint)' without keys: anyone on the network could read and write the store. Configure CURVE (--curve-secret-key FILE --authorized-keys FILE; `depot keys generate NAME` makes keys), or bind tcp://127.0.0.1:PORT or an ipc:// endpoint"
                )
            }
        }
        for (name, value) in [
            ("--max-sessions", maxSessions), ("--max-subscriptions-per-session", maxSubscriptionsPerSession),
            ("--max-in-flight-per-session", maxInFlightPerSession), ("--io-threads", ioThreads),
        ] where value < 1 {
            throw ConfigurationError(description: "\(name) must be at least 1, got \(value)")
        }
        guard maxQuerySeconds > 0 else {
            throw ConfigurationError(description: "--max-query-seconds must be positive, got \(maxQuerySeconds)")
        }
        guard heartbeatInterval > 0 else {
            throw ConfigurationError(description: "heartbeat interval must be positive")
        }
    }
}
