import ArgumentParser
import DepotPostgres
import DepotProtocol
import DepotServer
import DepotStore
import Foundation
import Logging

/// `depotd`: the Depot store daemon.
@main
struct Depotd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depotd",
        abstract: "Serve a Depot store: typed objects in SQLite, JSON-RPC 2.0 over ZeroMQ, live fetched results.",
        version: depotVersion)

    @Option(name: .customLong("data-dir"), help: "The directory holding the store (created mode 0700).")
    var dataDirectory = "./depot-data"

    @Option(
        name: .customLong("listen"),
        help:
            "An endpoint to bind, repeatable (default: ipc://<data-dir>/depot.sock). tcp binds must be on loopback unless CURVE keys are configured."
    )
    var endpoints: [String] = []

    @Option(
        name: .customLong("curve-secret-key"),
        help:
            "The server's CURVE secret key file (Z85; `depot keys generate NAME` writes NAME.key). TCP endpoints then need an authorized client key."
    )
    var curveSecretKey: String?

    @Option(
        name: .customLong("authorized-keys"),
        help:
            "The client keys allowed in: '<Z85 public key> <role> [name]' per line, role read|write|admin, # comments. Re-read on SIGHUP."
    )
    var authorizedKeys: String?

    @Option(
        help:
            "Row-level scopes: a JSON file of roles with per-entity read and write predicates ($keyName, $<attr> from the key's line). Re-read on SIGHUP."
    )
    var policy: String?

    @Option(help: "A model file ({\"entities\": [...]}) to define at start-up.")
    var model: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    @Option(
        name: .customLong("heartbeat-interval"), help: "Seconds; a client silent for three intervals is disconnected.")
    var heartbeatInterval = 10.0

    @Option(name: .customLong("max-message-size"), help: "The largest inbound message, in bytes.")
    var maxMessageSize: Int64 = 16 << 20

    @Option(
        name: .customLong("send-high-water-mark"),
        help: "Messages ZeroMQ queues per client before the daemon's own backlog takes over.")
    var sendHighWaterMark: Int32 = 10_000

    @Option(
        name: .customLong("session-queue-limit"),
        help: "Backlogged messages per client past which its subscriptions overflow (results/didInvalidate).")
    var sessionQueueLimit = 10_000

    @Option(
        name: .customLong("history-retention"),
        help:
            "How much persistent history to keep: a count (100000), an age (7d, 24h, 30m), a size (512MB), several joined by commas (100000,512MB), or forever."
    )
    var historyRetention = "100000"

    @Option(
        name: .customLong("log-retention"),
        help:
            "With --store postgresql://…: how much of the cluster's change log to keep once every daemon has applied it, as --history-retention says it (a count, an age, a size, several joined by commas), or forever."
    )
    var logRetention = "forever"

    @Option(
        name: .customLong("log-grace"),
        help:
            "With --store postgresql://…: how long a daemon not seen holds back the pruning of entries it has not applied (an age: 10m, 1h, 90s); one away longer rebuilds itself from a snapshot."
    )
    var logGrace = "10m"

    @Option(
        name: .customLong("max-fetch-objects"),
        help: "The most objects a plain store/fetch returns; larger results must be paged or streamed.")
    var maxFetchObjects = 100_000

    @Option(name: .customLong("max-sessions"), help: "The most client sessions at once; more get -32017 (overloaded).")
    var maxSessions = 1024

    @Option(
        name: .customLong("io-threads"),
        help: "ZeroMQ I/O threads moving the connections' bytes (default: one per two cores, from one to four).")
    var ioThreads = ServerConfiguration.defaultIOThreads

    @Option(
        name: .customLong("max-subscriptions-per-session"),
        help: "The most live results/subscribe one session may hold; more get -32017.")
    var maxSubscriptionsPerSession = 1000

    @Option(
        name: .customLong("max-in-flight-per-session"),
        help: "The most requests one session may have running or queued; more get -32017 at once.")
    var maxInFlightPerSession = 1000

    @Option(
        name: .customLong("max-query-seconds"),
        help: "Seconds a read may run without producing a row before it is stopped (a runaway SUBQUERY or predicate).")
    var maxQuerySeconds: Double = 30

    @Option(
        help: """
            Where the store lives: sqlite (the default: embedded, in the data directory) or \
            postgresql://USER@HOST:PORT/DB?schema=NAME, a cluster of daemons on one PostgreSQL \
            (password from PGPASSWORD or the passfile, ~/.pgpass or PGPASSFILE; never on the command line).
            """)
    var store = "sqlite"

    func run() throws {
        var blocked = Self.handledSignals
        pthread_sigmask(SIG_BLOCK, &blocked, nil)
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("unknown log level '\(logLevel)'")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "depotd")
        guard let retention = HistoryRetention(parsing: historyRetention) else {
            throw ValidationError(
                "--history-retention must be a count (100000), an age (7d, 24h, 30m, 90s), a size (512MB, 2GB), several of them joined by commas (100000,512MB) or forever, got '\(historyRetention)'"
            )
        }
        // Checked on every store, so that a typo never waits for the day the daemon joins a cluster.
        guard let logRetention = HistoryRetention(parsing: logRetention) else {
            throw ValidationError(
                "--log-retention must be a count (100000), an age (7d, 24h, 30m, 90s), a size (512MB, 2GB), several of them joined by commas (100000,512MB) or forever, got '\(self.logRetention)'"
            )
        }
        guard case .age(let logGrace)? = HistoryRetention(parsing: logGrace) else {
            throw ValidationError("--log-grace must be an age (10m, 1h, 90s), got '\(self.logGrace)'")
        }
        let directory = URL(fileURLWithPath: dataDirectory, isDirectory: true).standardizedFileURL
        var configuration = ServerConfiguration(
            dataDirectory: directory, endpoints: endpoints, heartbeatInterval: heartbeatInterval,
            maxMessageSize: maxMessageSize,
            sendHighWaterMark: sendHighWaterMark, sessionQueueLimit: sessionQueueLimit,
            maxFetchObjects: maxFetchObjects,
            historyRetention: retention)
        if let model {
            configuration.model = try readModel(from: model)
        }
        if let curveSecretKey {
            do {
                configuration.curveSecretKey = try readKeyFile(curveSecretKey, what: "CURVE secret key")
            } catch {
                throw StartupFailure(message: error.description)
            }
        }
        configuration.authorizedKeysFile = authorizedKeys
        configuration.policyFile = policy
        configuration.maxSessions = maxSessions
        configuration.ioThreads = ioThreads
        // One descriptor per session: as many as the hard limit allows (fitSessions says if still too few).
        let files = OpenFileLimit.raiseSoftLimit()
        logger.debug("open-file limit \(files.soft) (hard \(files.hard))")
        configuration.maxSubscriptionsPerSession = maxSubscriptionsPerSession
        configuration.maxInFlightPerSession = maxInFlightPerSession
        configuration.maxQuerySeconds = maxQuerySeconds
        if store != "sqlite" {
            configuration.replication = try joinCluster(
                directory: directory, retention: logRetention, grace: .milliseconds(Int64(logGrace * 1000)),
                logger: logger)
        }
        let server: DepotServer
        do {
            // Opens the store, defines the model, then binds: a failure binds nothing.
            server = try DepotServer(configuration: configuration, logger: logger)
        } catch {
            configuration.replication?.stop()
            throw StartupFailure(message: error.description)
        }
        server.start()
        let bound = server.boundEndpoints.joined(separator: " ")
        // Written unbuffered: scripts and tests wait for this line to learn the port.
        FileHandle.standardOutput.write(Data("depotd listening on \(bound)\n".utf8))
        Self.serveSignals(server, logger: logger)
    }

    /// Connects to the cluster `--store` names; any problem stops the daemon before anything is opened.
    private func joinCluster(directory: URL, retention: HistoryRetention, grace: Duration, logger: Logger) throws
        -> PostgresReplication
    {
        let environment = ProcessInfo.processInfo.environment
        var url: PostgresURL
        do {
            url = try PostgresURL(store, password: environment["PGPASSWORD"])
            if url.password == nil { url.password = PostgresPassfile.password(for: url, environment: environment) }
        } catch {
            throw StartupFailure(
                message: "--store must be sqlite or postgresql://USER@HOST:PORT/DB?schema=NAME: \(error)")
        }
        guard URLComponents(string: store)?.password == nil else {
            throw StartupFailure(
                message: "--store must not hold a password (it shows in ps): use PGPASSWORD or ~/.pgpass")
        }
        let host = ProcessInfo.processInfo.hostName
        do {
            return try PostgresReplication(
                url: url, node: "\(host):\(directory.path)", logRetention: retention, logGrace: grace,
                // Pruning as often as a daemon may go unseen, at most every 10 s.
                pruneInterval: min(.seconds(10), grace),
                logger: Logger(label: "depotd.cluster"))
        } catch {
            throw StartupFailure(
                message:
                    "cannot join the cluster at \(url.host):\(url.port)/\(url.database) (schema \(url.schema)): \(error.message)"
            )
        }
    }

    /// Reads and decodes a model file; any problem stops the daemon before anything is opened.
    private func readModel(from path: String) throws -> [EntityDescription] {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = access(path, R_OK) == 0 ? "not a readable file" : String(cString: strerror(errno))
            throw StartupFailure(message: "cannot read the model file \(path): \(reason)")
        }
        let json: JSONValue
        do {
            json = try JSONParser.parse(Array(data))
        } catch {
            throw StartupFailure(message: "the model file \(path) is not JSON: \(error)")
        }
        do {
            let entities = json["entities"] ?? json
            return try JSONCoding.decode([EntityDescription].self, from: entities, field: "entities")
        } catch {
            throw StartupFailure(message: "the model file \(path) cannot be defined: \(error.message)")
        }
    }

    /// SIGTERM, SIGINT and SIGHUP: blocked in every thread from the start of
    /// ``run()`` (threads inherit the mask) and taken by `sigwait` on the main
    /// thread, so that none is lost however early it comes, even before the
    /// daemon is listening (a signal disposition set to ignore while a dispatch
    /// source is still being registered would drop it).
    static var handledSignals: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signalNumber in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, signalNumber) }
        return set
    }

    /// Serves signals on the calling (main) thread, forever: SIGTERM and SIGINT
    /// stop the server and exit 0; SIGHUP re-reads the authorized keys and the
    /// policy (a bad file is logged and the keys and policy in force stay).
    static func serveSignals(_ server: DepotServer, logger: Logger) -> Never {
        var set = handledSignals
        while true {
            var signalNumber: Int32 = 0
            guard sigwait(&set, &signalNumber) == 0 else { continue }
            if signalNumber == SIGHUP {
                do {
                    try server.reloadAuthorizedKeys()
                } catch {
                    logger.error("SIGHUP: \(error.description); the keys and policy in force are unchanged")
                }
                continue
            }
            server.stop()
            Foundation.exit(0)
        }
    }
}

/// A start-up failure: printed as `depotd: <message>` on standard error, exit status 1.
struct StartupFailure: Error, CustomStringConvertible {
    /// What went wrong and why.
    let message: String

    var description: String { message }
}
