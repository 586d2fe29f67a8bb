import DepotClient
import DepotProtocol

/// Sequential single-object `store/save` commits through `depotd` (over ipc)
/// against single-row SQLite transactions through the C API, on a copy of the
/// daemon's tables with the same pragmas (WAL, `synchronous = NORMAL`).
///
/// Two shapes: one Item insert per save, one Team update (`wins`) per save.
/// The Depot side uses a raw DEALER (``RawRPCClient``); a third case goes
/// through `DepotConnection.call(StoreSave.self, …)` for information.
struct SaveBenchmark: Benchmark {
    static let name = "save"
    static let summary =
        "single-object store/save commits/s: depotd (ipc) vs raw SQLite single-row transactions (target ≥ 0.3×)"
    static let target = 0.3

    func run(_ suite: SuiteRun) async throws {
        let daemon = try suite.startDaemon(.ipc)
        defer { daemon.stop() }
        let rpc = try RawRPCClient(endpoint: daemon.endpoint)
        try rpc.initialize()
        _ = try rpc.call("model/define", params: BenchmarkModel.defineParams)
        let seeded = try rpc.call("store/save", params: BenchmarkModel.seedTeamsParams)
        let teamRows: [Int64] = (seeded["versions"]?.objectValue ?? [:]).keys.compactMap {
            Int64($0.split(separator: "/").last ?? "")
        }.sorted()
        guard teamRows.count == BenchmarkModel.teamCount else {
            throw BenchmarkError("seeding teams returned \(seeded.excerpt())")
        }

        let raw = try RawSQLite(path: suite.directory.appendingPathComponent("raw.sqlite").path)
        let schema = try raw.copySchema(
            fromDatabaseAt: daemon.dataDirectory.appendingPathComponent("depot.sqlite").path)
        suite.note("rawSchema", .array(schema.map { .string($0) }))
        let seedTeam = try raw.prepare(#"INSERT INTO e_Team ("teamName", "qualifyingZone", "wins") VALUES (?, ?, 0)"#)
        for index in 0..<BenchmarkModel.teamCount {
            seedTeam.bind(1, "Team \(index)")
            seedTeam.bind(2, "Zone \(index % 6)")
            try seedTeam.run()
        }
        let begin = try raw.prepare("BEGIN IMMEDIATE")
        let commit = try raw.prepare("COMMIT")
        let insertItem = try raw.prepare(#"INSERT INTO e_Item ("name", "createdAt", "done") VALUES (?, ?, ?)"#)
        let updateTeam = try raw.prepare(#"UPDATE e_Team SET "wins" = ?, _version = _version + 1 WHERE id = ?"#)

        // The ceiling for a networked save: a raw ROUTER in this process that
        // commits the same row per request (no JSON work) and answers.
        let rawServerInsert = try raw.prepare(#"INSERT INTO e_Item ("name", "createdAt", "done") VALUES (?, ?, ?)"#)
        var rawServerCount = 0
        let rawServer = try RawEchoServer(endpoint: "ipc://\(suite.directory.path)/raw-save.sock") { _ in
            do {
                try begin.run()
                rawServerInsert.bind(1, "raw item \(rawServerCount)")
                rawServerInsert.bind(2, BenchmarkModel.itemDate.seconds)
                rawServerInsert.bind(3, Int64(0))
                try rawServerInsert.run()
                try commit.run()
                rawServerCount += 1
                return Array(#"{"jsonrpc":"2.0","id":1,"result":{}}"#.utf8)
            } catch {
                return Array(#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"raw commit failed"}}"#.utf8)
            }
        }
        defer { rawServer.stop() }
        let rawServerClient = try RawDealer(endpoint: rawServer.endpoint)

        let connection = try await DepotConnection.connect(
            to: daemon.endpoint, clientInfo: ImplementationInfo(name: "DepotBenchmarks", version: "1"))
        var depotInserts = 0
        let measured = try await suite.sampler.measure([
            BenchmarkCase("save.item.depot", unit: "commit", daemon: daemon.pid) { iteration in
                try rpc.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 100, method: "store/save",
                        params: BenchmarkModel.insertItemParams(iteration)))
                depotInserts += 1
            },
            BenchmarkCase("save.item.sqlite", unit: "commit") { iteration in
                try begin.run()
                insertItem.bind(1, "item \(iteration)")
                insertItem.bind(2, BenchmarkModel.itemDate.seconds)
                insertItem.bind(3, Int64(0))
                try insertItem.run()
                _ = raw.lastInsertedRowID
                try commit.run()
            },
            BenchmarkCase("save.item.zmq+sqlite", unit: "commit") { iteration in
                try rawServerClient.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 100, method: "store/save",
                        params: BenchmarkModel.insertItemParams(iteration)),
                    expecting: "\"result\"")
            },
            BenchmarkCase("save.team.depot", unit: "commit", daemon: daemon.pid) { iteration in
                let row = teamRows[iteration % teamRows.count]
                try rpc.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 100, method: "store/save",
                        params: BenchmarkModel.updateTeamParams(row: row, wins: iteration)))
            },
            BenchmarkCase("save.team.sqlite", unit: "commit") { iteration in
                try begin.run()
                updateTeam.bind(1, Int64(iteration))
                updateTeam.bind(2, Int64(iteration % BenchmarkModel.teamCount + 1))
                try updateTeam.run()
                try commit.run()
            },
            BenchmarkCase("save.item.client", unit: "commit", daemon: daemon.pid) { iteration in
                let values: [String: JSONValue] = [
                    "name": .string("client item \(iteration)"), "createdAt": .string(BenchmarkModel.itemDate.wire),
                    "done": false,
                ]
                _ = try await connection.call(
                    StoreSave.self, .init(inserted: [InsertedObject(entity: "Item", values: values)]))
                depotInserts += 1
            },
        ])
        suite.record(measured)
        suite.compare("save.item", measured[0], to: measured[1], target: Self.target)
        suite.compare("save.team", measured[3], to: measured[4], target: Self.target)
        suite.compare("save.item.client", measured[5], to: measured[1], target: nil)
        // What a sequential client can reach at best over ipc (echo-bound), and Depot against that.
        suite.compare("save.item.ceiling", measured[2], to: measured[1], target: nil)
        suite.compare("save.item.vs-raw-server", measured[0], to: measured[2], target: nil)

        // Every save must have committed: the store holds exactly the items sent.
        let count = try rpc.call("store/count", params: #"{"entity":"Item"}"#)["count"]?.intValue ?? -1
        guard count == depotInserts else {
            throw BenchmarkError("the store holds \(count) items, \(depotInserts) were saved")
        }
        suite.note("itemsSaved", .int(Int64(count)))
        suite.note("daemonMemory", daemon.memory()?.json ?? .null)
        await connection.close()
    }
}
