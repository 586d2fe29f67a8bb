/// The protocol version this package speaks.
public let depotProtocolVersion = "1"

/// A program's name and version, as exchanged by `initialize`.
public struct ImplementationInfo: Codable, Hashable, Sendable {
    /// The program's name.
    public var name: String
    /// The program's version.
    public var version: String

    /// Creates the info.
    public init(name: String, version: String) {
        self.name = name
        self.version = version
    }
}

/// `initialize`: opens a session; every other request but `ping` waits for it.
public enum Initialize: Method {
    public static let name = "initialize"

    /// The client's side of the handshake.
    public struct Parameters: Codable, Hashable, Sendable {
        /// Who the client is.
        public var clientInfo: ImplementationInfo?
        /// The protocol version the client speaks; only `"1"` exists.
        public var protocolVersion: String
        /// What the client supports; reserved.
        public var capabilities: JSONValue?

        /// Creates the params.
        public init(
            clientInfo: ImplementationInfo?, protocolVersion: String = depotProtocolVersion,
            capabilities: JSONValue? = [:]
        ) {
            self.clientInfo = clientInfo
            self.protocolVersion = protocolVersion
            self.capabilities = capabilities
        }
    }

    /// The server's side of the handshake.
    public struct Result: Codable, Hashable, Sendable {
        /// Who the server is.
        public var serverInfo: ImplementationInfo
        /// The protocol version the server speaks.
        public var protocolVersion: String
        /// The session's id, for logs.
        public var sessionId: String
        /// Seconds between the client's messages at most; three silent intervals end the session.
        public var heartbeatInterval: Double
        /// What the server supports.
        public var capabilities: JSONValue

        /// Creates the result.
        public init(
            serverInfo: ImplementationInfo, protocolVersion: String, sessionId: String, heartbeatInterval: Double,
            capabilities: JSONValue
        ) {
            self.serverInfo = serverInfo
            self.protocolVersion = protocolVersion
            self.sessionId = sessionId
            self.heartbeatInterval = heartbeatInterval
            self.capabilities = capabilities
        }
    }
}

/// `ping`: answers `{}`; also keeps a session alive.
public enum Ping: Method {
    public static let name = "ping"
    public typealias Parameters = Empty
    public typealias Result = Empty
}

/// `disconnect`: ends the session and frees its subscriptions.
public enum Disconnect: Method {
    public static let name = "disconnect"
    public typealias Parameters = Empty
    public typealias Result = Null
}

/// `$/cancelRequest`: asks the server to stop a request; it answers -32800.
public enum CancelRequest: NotificationMethod {
    public static let name = "$/cancelRequest"

    /// Which request to cancel.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The id of the request to cancel.
        public var id: RequestID

        /// Creates the params.
        public init(id: RequestID) { self.id = id }
    }
}

/// `$/progress`: work-done progress or a partial-result chunk for a request that carried a token.
public enum ProgressNotification: NotificationMethod {
    public static let name = "$/progress"

    /// The token and what it reports.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The `workDoneToken` or `partialResultToken` of the request.
        public var token: JSONValue
        /// A ``WorkDoneProgress`` (`kind` begin, report or end) or `{objects: [...]}`.
        public var value: JSONValue

        /// Creates the params.
        public init(token: JSONValue, value: JSONValue) {
            self.token = token
            self.value = value
        }
    }
}

/// The value of a work-done `$/progress`.
public struct WorkDoneProgress: Codable, Hashable, Sendable {
    /// The stage.
    public enum Kind: String, Codable, Sendable {
        case begin, report, end
    }

    /// The stage.
    public var kind: Kind
    /// What the work is (begin only).
    public var title: String?
    /// How many units there are in all, when known.
    public var total: Int64?
    /// How many units are done.
    public var completed: Int64?
    /// `completed / total × 100`, when the total is known.
    public var percentage: Double?
    /// A line for people.
    public var message: String?
    /// Whether the work was cancelled (end only).
    public var cancelled: Bool?

    /// Creates a progress value.
    public init(
        kind: Kind, title: String? = nil, total: Int64? = nil, completed: Int64? = nil, percentage: Double? = nil,
        message: String? = nil, cancelled: Bool? = nil
    ) {
        self.kind = kind
        self.title = title
        self.total = total
        self.completed = completed
        self.percentage = percentage
        self.message = message
        self.cancelled = cancelled
    }

    /// The wire form; `begin` always carries `total`, `null` when unknown.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["kind": .string(kind.rawValue)]
        if let title { members["title"] = .string(title) }
        if kind == .begin {
            members["total"] = total.map { .int($0) } ?? .null
        } else if let total {
            members["total"] = .int(total)
        }
        if let completed { members["completed"] = .int(completed) }
        if let percentage { members["percentage"] = .double(percentage) }
        if let message { members["message"] = .string(message) }
        if let cancelled { members["cancelled"] = .bool(cancelled) }
        return .object(members)
    }
}
