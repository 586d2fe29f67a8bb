/// `server/stats`: what the daemon is doing now (DESIGN.md §12): its sessions,
/// its shared fetched-results sets, the writer's queue, commit and delta
/// latency percentiles, the store's size and its last transaction.
public enum ServerStats: Method {
    public static let name = "server/stats"

    /// Which page of the sessions to list (DESIGN.md §12: bounded at 10,000 sessions).
    public struct Parameters: Codable, Hashable, Sendable {
        /// The most sessions to list (default ``defaultSessionLimit``, at most ``largestSessionLimit``).
        public var sessionLimit: Int?
        /// Lists the sessions after this cursor: the `nextSessionsAfter` of the previous page.
        public var sessionsAfter: String?

        /// The sessions listed when no `sessionLimit` is given.
        public static let defaultSessionLimit = 1000
        /// The largest `sessionLimit`.
        public static let largestSessionLimit = 10_000

        /// Creates the params: the first page by default.
        public init(sessionLimit: Int? = nil, sessionsAfter: String? = nil) {
            self.sessionLimit = sessionLimit
            self.sessionsAfter = sessionsAfter
        }
    }

    /// A snapshot of the daemon's figures.
    public struct Result: Codable, Hashable, Sendable {
        /// Who the server is and how long it has run.
        public var server: Server
        /// The open sessions, by client name then id: a page of at most `sessionLimit`
        /// (``server``'s `sessionCount` counts them all).
        public var sessions: [Session]
        /// The cursor of the next page (`sessionsAfter`), `nil` on the last page.
        public var nextSessionsAfter: String?
        /// Every maintained result set, with the subscriptions sharing it.
        public var subscriptions: [SharedResults]
        /// Notifications queued for clients since start, by method name.
        public var notificationsSent: [String: Int64]
        /// The single writer.
        public var writer: Writer
        /// Latency percentiles.
        public var latency: Latency
        /// The store on disk.
        public var store: StoreFigures
        /// What publishing commits read of the store, by reason; `nil` from a daemon that does not count them.
        public var storeReads: StoreReads?

        /// Creates the result.
        public init(
            server: Server, sessions: [Session], nextSessionsAfter: String? = nil, subscriptions: [SharedResults],
            notificationsSent: [String: Int64], writer: Writer, latency: Latency, store: StoreFigures,
            storeReads: StoreReads? = nil
        ) {
            self.storeReads = storeReads
            self.server = server
            self.sessions = sessions
            self.nextSessionsAfter = nextSessionsAfter
            self.subscriptions = subscriptions
            self.notificationsSent = notificationsSent
            self.writer = writer
            self.latency = latency
            self.store = store
        }
    }

    /// The daemon itself.
    public struct Server: Codable, Hashable, Sendable {
        /// `depotd`.
        public var name: String
        /// Its version.
        public var version: String
        /// Seconds since it started serving.
        public var uptimeSeconds: Double
        /// The endpoints it listens on.
        public var endpoints: [String]
        /// How many sessions are open.
        public var sessionCount: Int?
        /// The most sessions it serves at once (`--max-sessions`, or less when the open-file limit lowered it).
        public var maxSessions: Int?
        /// What `--max-sessions` asked for, present only when the open-file limit lowered it.
        public var maxSessionsRequested: Int?
        /// The open-file limit (soft) it runs with, `nil` when unlimited.
        public var openFileLimit: Int?
        /// ZeroMQ I/O threads.
        public var ioThreads: Int?
        /// The listen queue of each endpoint (`ZMQ_BACKLOG`).
        public var listenBacklog: Int?

        /// Creates the figures.
        public init(
            name: String, version: String, uptimeSeconds: Double, endpoints: [String], sessionCount: Int? = nil,
            maxSessions: Int? = nil, maxSessionsRequested: Int? = nil, openFileLimit: Int? = nil,
            ioThreads: Int? = nil, listenBacklog: Int? = nil
        ) {
            self.name = name
            self.version = version
            self.uptimeSeconds = uptimeSeconds
            self.endpoints = endpoints
            self.sessionCount = sessionCount
            self.maxSessions = maxSessions
            self.maxSessionsRequested = maxSessionsRequested
            self.openFileLimit = openFileLimit
            self.ioThreads = ioThreads
            self.listenBacklog = listenBacklog
        }
    }

    /// One client session.
    public struct Session: Codable, Hashable, Sendable {
        /// The session id `initialize` returned.
        public var id: String
        /// Who the client said it is.
        public var client: ImplementationInfo?
        /// The name of the CURVE key it authenticated with (`nil` on unauthenticated endpoints).
        public var key: String?
        /// The key's role as its line names it (a plain role or a policy role), `nil` without a key.
        public var role: String?
        /// The key's row-level scope: the policy's rule texts by entity, `nil` when unscoped (DESIGN.md §2).
        public var scope: JSONValue?
        /// How many fetched-results subscriptions it holds.
        public var subscriptions: Int
        /// How many `store/observe` registrations it holds.
        public var observers: Int
        /// Requests of it still running.
        public var inFlight: Int
        /// Messages waiting for it beyond ZeroMQ's own queue (a slow consumer's backlog).
        public var outboundBacklog: Int
        /// Seconds since it last sent anything.
        public var idleSeconds: Double

        /// Creates the figures.
        public init(
            id: String, client: ImplementationInfo?, key: String?, subscriptions: Int, observers: Int, inFlight: Int,
            outboundBacklog: Int, idleSeconds: Double
        ) {
            self.id = id
            self.client = client
            self.key = key
            self.subscriptions = subscriptions
            self.observers = observers
            self.inFlight = inFlight
            self.outboundBacklog = outboundBacklog
            self.idleSeconds = idleSeconds
        }
    }

    /// One maintained result set and the subscriptions (of one or more sessions) sharing it.
    public struct SharedResults: Codable, Hashable, Sendable {
        /// The fetch request (without batch size and tokens, which do not change the results).
        public var request: JSONValue
        /// The section key path, if sectioned.
        public var sectionKeyPath: String?
        /// The named cache it persists under, if any.
        public var cacheName: String?
        /// How many objects match.
        public var rows: Int
        /// How many sections it has (1 when not sectioned and not empty).
        public var sections: Int
        /// The last transaction it reflects.
        public var transaction: Int64
        /// The ids of the subscriptions sharing it.
        public var subscriptionIds: [String]
        /// How many distinct sessions share it.
        public var sessions: Int
        /// `results/didChange` notifications sent for it, summed over its subscriptions.
        public var notificationsSent: Int64

        /// Creates the figures.
        public init(
            request: JSONValue, sectionKeyPath: String?, cacheName: String?, rows: Int, sections: Int,
            transaction: Int64, subscriptionIds: [String], sessions: Int, notificationsSent: Int64
        ) {
            self.request = request
            self.sectionKeyPath = sectionKeyPath
            self.cacheName = cacheName
            self.rows = rows
            self.sections = sections
            self.transaction = transaction
            self.subscriptionIds = subscriptionIds
            self.sessions = sessions
            self.notificationsSent = notificationsSent
        }
    }

    /// The single writer's queue.
    public struct Writer: Codable, Hashable, Sendable {
        /// Write requests queued or running now.
        public var queueDepth: Int
        /// Write requests that committed a transaction since start.
        public var commits: Int64

        /// Creates the figures.
        public init(queueDepth: Int, commits: Int64) {
            self.queueDepth = queueDepth
            self.commits = commits
        }
    }

    /// The store reads publishing commits made since start, by what each read was for (issue 34: the
    /// deltas come from the commit's own row values; a read shows where those were not enough).
    public struct StoreReads: Codable, Hashable, Sendable {
        /// Commits published to at least one live result set.
        public var commits: Int64
        /// Commits whose publishing opened a snapshot of the store.
        public var snapshot: Int64
        /// Reads of changed rows' values the commit did not hand over.
        public var changedRows: Int64
        /// Reads following a relationship (a predicate, sort or dependency through one).
        public var relationship: Int64
        /// Reads refilling a window from beyond its edge.
        public var windowRefill: Int64
        /// Reads of the values (include columns) that deltas carry.
        public var include: Int64

        /// Creates the figures.
        public init(
            commits: Int64 = 0, snapshot: Int64 = 0, changedRows: Int64 = 0, relationship: Int64 = 0,
            windowRefill: Int64 = 0, include: Int64 = 0
        ) {
            self.commits = commits
            self.snapshot = snapshot
            self.changedRows = changedRows
            self.relationship = relationship
            self.windowRefill = windowRefill
            self.include = include
        }
    }

    /// Latency percentiles since start.
    public struct Latency: Codable, Hashable, Sendable {
        /// A committing write on the writer: validation, SQL and the SQLite commit
        /// (the fan-out of notifications that follows is not included).
        public var commit: Percentiles
        /// Turning one committed transaction into every subscription's `results/didChange`.
        public var delta: Percentiles

        /// Creates the figures.
        public init(commit: Percentiles, delta: Percentiles) {
            self.commit = commit
            self.delta = delta
        }
    }

    /// A latency distribution in milliseconds (each percentile within 1/32 of the true value).
    public struct Percentiles: Codable, Hashable, Sendable {
        /// How many samples.
        public var count: Int64
        /// The mean.
        public var meanMs: Double
        /// The median.
        public var p50Ms: Double
        /// The 90th percentile.
        public var p90Ms: Double
        /// The 99th percentile.
        public var p99Ms: Double
        /// The largest sample.
        public var maxMs: Double

        /// Creates the figures.
        public init(count: Int64, meanMs: Double, p50Ms: Double, p90Ms: Double, p99Ms: Double, maxMs: Double) {
            self.count = count
            self.meanMs = meanMs
            self.p50Ms = p50Ms
            self.p90Ms = p90Ms
            self.p99Ms = p99Ms
            self.maxMs = maxMs
        }
    }

    /// The store on disk.
    public struct StoreFigures: Codable, Hashable, Sendable {
        /// The SQLite file.
        public var path: String
        /// The database file's size in bytes.
        public var sizeBytes: Int64
        /// The write-ahead log's size in bytes.
        public var walBytes: Int64
        /// The newest committed transaction's number (0 before any).
        public var transaction: Int64
        /// The newest transaction still in history, if any.
        public var lastTransaction: TransactionSummary?

        /// Creates the figures.
        public init(
            path: String, sizeBytes: Int64, walBytes: Int64, transaction: Int64, lastTransaction: TransactionSummary?
        ) {
            self.path = path
            self.sizeBytes = sizeBytes
            self.walBytes = walBytes
            self.transaction = transaction
            self.lastTransaction = lastTransaction
        }
    }

    /// One transaction, counted by entity.
    public struct TransactionSummary: Codable, Hashable, Sendable {
        /// Its number.
        public var transaction: Int64
        /// When it committed, ISO 8601 UTC.
        public var timestamp: String
        /// Who made it, if the save said.
        public var author: String?
        /// Inserted, updated and deleted objects, by entity.
        public var counts: [String: ChangeCounts]

        /// Creates the summary.
        public init(transaction: Int64, timestamp: String, author: String?, counts: [String: ChangeCounts]) {
            self.transaction = transaction
            self.timestamp = timestamp
            self.author = author
            self.counts = counts
        }
    }

    /// How many objects of one entity a transaction changed.
    public struct ChangeCounts: Codable, Hashable, Sendable {
        /// Inserted objects.
        public var inserted: Int
        /// Updated objects.
        public var updated: Int
        /// Deleted objects.
        public var deleted: Int

        /// Creates the counts.
        public init(inserted: Int, updated: Int, deleted: Int) {
            self.inserted = inserted
            self.updated = updated
            self.deleted = deleted
        }
    }
}

/// `server/backup`: writes a consistent copy of the daemon's embedded store
/// into a directory on the daemon's host, as of one transaction, while the
/// daemon serves (DESIGN.md §12). `depotd --data-dir <destination>` serves the copy.
public enum ServerBackup: Method {
    public static let name = "server/backup"

    /// Where to write the copy.
    public struct Parameters: Codable, Hashable, Sendable {
        /// A directory path on the daemon's host: created if missing; it must not hold a store already.
        public var destination: String
        /// A token for work-done `$/progress` (pages copied of the store's pages).
        public var workDoneToken: JSONValue?

        /// Creates the params.
        public init(destination: String, workDoneToken: JSONValue? = nil) {
            self.destination = destination
            self.workDoneToken = workDoneToken
        }
    }

    /// What the copy holds.
    public struct Result: Codable, Hashable, Sendable {
        /// The transaction the copy is as of: its history ends there.
        public var transaction: Int64
        /// The copy's store file.
        public var path: String
        /// Its size in bytes.
        public var sizeBytes: Int64

        /// Creates the result.
        public init(transaction: Int64, path: String, sizeBytes: Int64) {
            self.transaction = transaction
            self.path = path
            self.sizeBytes = sizeBytes
        }
    }
}
