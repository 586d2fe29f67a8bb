import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import GRDBSQLite
import ZeroMQ

/// Issue 3's benchmark, kept for its figure the ping and save suites do not have:
/// saves/s with several clients at once. In one run: ping round trips/s through
/// depotd (tcp) against a raw libzmq DEALER/ROUTER echo in this program, and
/// single-object `store/save` commits/s (one client, then 8 at once) against raw
/// SQLite single-row transactions through the C API with the same WAL and
/// `synchronous = NORMAL` settings.
struct FoundationSaveConcurrencyBenchmark: Benchmark {
    static let name = "foundation"
    static let summary = "single-shot ping/save ratios (tcp) and save throughput with concurrent clients vs raw commits"

    func run(_ suite: SuiteRun) async throws {
        let report = try await measure(suite, iterations: suite.options.quick ? 2_000 : 20_000)
        suite.noteReport(report)
        suite.check("foundation.ping", report.pingRatio, target: 0.5, of: "depotd ping/s", over: "raw echo/s")
        suite.check("foundation.save", report.saveRatio, target: 0.3, of: "depotd saves/s", over: "raw commits/s")
        suite.check(
            "foundation.save-\(report.concurrentClients)-clients", report.concurrentSaveRatio, target: nil,
            of: "depotd saves/s, \(report.concurrentClients) clients", over: "raw commits/s")
    }

    struct Report: Codable {
        var rawEchoPerSecond: Double
        var depotPingPerSecond: Double
        var clientPingPerSecond: Double
        var pingRatio: Double
        var clientPingRatio: Double
        var rawCommitsPerSecond: Double
        var depotSavesPerSecond: Double
        var clientSavesPerSecond: Double
        var saveRatio: Double
        var clientSaveRatio: Double
        var concurrentClients: Int
        var concurrentSavesPerSecond: Double
        var concurrentSaveRatio: Double
    }

    private func measure(_ suite: SuiteRun, iterations: Int) async throws -> Report {
        let daemon = try suite.startDaemon(.tcp)
        defer { daemon.stop() }
        let context = try Context()
        let ping = Array(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.utf8)

        // Raw echo: a ROUTER thread that sends every message back.
        let router = try Socket(context: context, type: .router)
        try router.setLinger(milliseconds: 0)
        try router.bind("tcp://127.0.0.1:*")
        let echoEndpoint = try router.lastEndpoint()
        let echoThread = Thread {
            while let message = try? router.receive(), message.count > 1, message[1] != [0] {
                _ = try? router.send(message)
            }
            router.close()
        }
        echoThread.start()
        let echo = try Socket(context: context, type: .dealer)
        try echo.setLinger(milliseconds: 0)
        try echo.connect(echoEndpoint)
        let rawEcho = try rate(iterations) {
            try echo.send(ping)
            _ = try echo.receive()
        }
        try echo.send([0])
        echo.close()

        // depotd through a bare DEALER: the daemon's cost, not the client library's.
        let raw = try Socket(context: context, type: .dealer)
        try raw.setLinger(milliseconds: 0)
        try raw.connect(daemon.endpoint)
        try raw.send(Array(#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"1"}}"#.utf8))
        _ = try raw.receive()
        let depotPing = try rate(iterations) {
            try raw.send(ping)
            _ = try raw.receive()
        }
        let client = try await DepotConnection.connect(to: daemon.endpoint)
        let clientPing = try await asyncRate(iterations) { _ = try await client.call(Ping.self, Empty()) }

        // Saves: one Item insert per transaction.
        _ = try await client.call(ModelDefine.self, .init(entities: [WorldCup.item]))
        let saves = max(iterations / 4, 100)
        var counter = 0
        let depotSaves = try rate(saves) {
            counter += 1
            try raw.send(
                Array(
                    #"{"jsonrpc":"2.0","id":2,"method":"store/save","params":{"inserted":[{"entity":"Item","values":{"name":"item \#(counter)","createdAt":"2026-11-22T10:15:30.250Z","done":false}}]}}"#
                        .utf8))
            _ = try raw.receive()
        }
        let clientSaves = try await asyncRate(saves) {
            counter += 1
            _ = try await client.call(
                StoreSave.self,
                .init(inserted: [
                    InsertedObject(
                        entity: "Item",
                        values: [
                            "name": .string("item \(counter)"), "createdAt": "2026-11-22T10:15:30.250Z", "done": false,
                        ])
                ]))
        }
        raw.close()
        client.abort()
        let clients = 8
        let concurrentSaves = try concurrentRate(
            clients: clients, each: saves / clients, endpoint: daemon.endpoint, context: context)
        let rawCommits = try rawSQLiteCommits(saves)
        return Report(
            rawEchoPerSecond: rawEcho, depotPingPerSecond: depotPing, clientPingPerSecond: clientPing,
            pingRatio: depotPing / rawEcho, clientPingRatio: clientPing / rawEcho,
            rawCommitsPerSecond: rawCommits, depotSavesPerSecond: depotSaves, clientSavesPerSecond: clientSaves,
            saveRatio: depotSaves / rawCommits, clientSaveRatio: clientSaves / rawCommits,
            concurrentClients: clients, concurrentSavesPerSecond: concurrentSaves,
            concurrentSaveRatio: concurrentSaves / rawCommits)
    }

    /// Saves/s with `clients` DEALERs on their own threads, each saving in sequence.
    private func concurrentRate(clients: Int, each: Int, endpoint: String, context: Context) throws -> Double {
        let sockets = try (0..<clients).map { _ in
            let socket = try Socket(context: context, type: .dealer)
            try socket.setLinger(milliseconds: 0)
            try socket.connect(endpoint)
            try socket.send(
                Array(#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"1"}}"#.utf8))
            _ = try socket.receive()
            return socket
        }
        let group = DispatchGroup()
        let start = ContinuousClock.now
        for (number, socket) in sockets.enumerated() {
            group.enter()
            Thread {
                for index in 0..<each {
                    _ = try? socket.send(
                        Array(
                            #"{"jsonrpc":"2.0","id":3,"method":"store/save","params":{"inserted":[{"entity":"Item","values":{"name":"c\#(number)-\#(index)","createdAt":"2026-11-22T10:15:30.250Z"}}]}}"#
                                .utf8))
                    _ = try? socket.receive()
                }
                group.leave()
            }.start()
        }
        group.wait()
        let elapsed = (ContinuousClock.now - start).seconds
        sockets.forEach { $0.close() }
        return Double(clients * each) / elapsed
    }

    /// Single-row transactions through the C API: BEGIN IMMEDIATE, one prepared INSERT, COMMIT.
    private func rawSQLiteCommits(_ count: Int) throws -> Double {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-bench-raw-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var db: OpaquePointer?
        guard sqlite3_open(directory.appendingPathComponent("raw.sqlite").path, &db) == SQLITE_OK else {
            throw BenchmarkError("sqlite3_open")
        }
        defer { sqlite3_close(db) }
        func exec(_ sql: String) throws {
            guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else {
                throw BenchmarkError(String(cString: sqlite3_errmsg(db)))
            }
        }
        try exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
        try exec(
            "CREATE TABLE item (id INTEGER PRIMARY KEY AUTOINCREMENT, _version INTEGER, name TEXT, createdAt REAL, done INTEGER)"
        )
        var statement: OpaquePointer?
        sqlite3_prepare_v2(
            db, "INSERT INTO item (_version, name, createdAt, done) VALUES (1, ?, ?, 0)", -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        var counter = 0
        return try rate(count) {
            counter += 1
            try exec("BEGIN IMMEDIATE")
            sqlite3_bind_text(statement, 1, "item \(counter)", -1, transient)
            sqlite3_bind_double(statement, 2, 1_790_000_000.25)
            guard sqlite3_step(statement) == SQLITE_DONE else { throw BenchmarkError("insert failed") }
            sqlite3_reset(statement)
            try exec("COMMIT")
        }
    }
}
