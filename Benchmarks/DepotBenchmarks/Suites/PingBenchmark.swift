import DepotClient
import DepotProtocol

/// Sequential `ping` round trips through `depotd` against a raw libzmq
/// DEALER/ROUTER echo in this process, over ipc and over tcp.
///
/// The Depot side uses the same raw DEALER client as the echo (``RawDealer``),
/// sending `{"jsonrpc":"2.0","id":N,"method":"ping"}` after `initialize`, so the
/// ratio measures the daemon. A third case goes through `DepotConnection.call`
/// to show what the Swift client adds (reported, no target).
struct PingBenchmark: Benchmark {
    static let name = "ping"
    static let summary = "ping round trips/s: depotd vs raw libzmq ROUTER echo, ipc and tcp (target ≥ 0.5×)"
    static let target = 0.5

    func run(_ suite: SuiteRun) async throws {
        for transport in DaemonProcess.Transport.allCases {
            let daemon = try suite.startDaemon(transport, label: "depotd-\(transport)")
            defer { daemon.stop() }
            let echo = try RawEchoServer(
                endpoint: transport == .ipc ? "ipc://\(suite.directory.path)/echo.sock" : "tcp://127.0.0.1:*")
            defer { echo.stop() }

            let rpc = try RawRPCClient(endpoint: daemon.endpoint)
            try rpc.initialize()
            let echoClient = try RawDealer(endpoint: echo.endpoint)
            let connection = try await DepotConnection.connect(
                to: daemon.endpoint, clientInfo: ImplementationInfo(name: "DepotBenchmarks", version: "1"))

            let prefix = "ping.\(transport.rawValue)"
            let measured = try await suite.sampler.measure([
                BenchmarkCase("\(prefix).depot", unit: "round trip", daemon: daemon.pid) { iteration in
                    try rpc.roundTrip(RawRPCClient.request(id: Int64(iteration) + 10, method: "ping"))
                },
                BenchmarkCase("\(prefix).zmq-echo", unit: "round trip") { iteration in
                    try echoClient.roundTrip(
                        RawRPCClient.request(id: Int64(iteration) + 10, method: "ping"), expecting: "\"ping\"")
                },
                BenchmarkCase("\(prefix).client", unit: "round trip", daemon: daemon.pid) { _ in
                    _ = try await connection.call(Ping.self, Empty())
                },
            ])
            suite.record(measured)
            suite.compare(prefix, measured[0], to: measured[1], target: Self.target)
            suite.compare("\(prefix).client", measured[2], to: measured[1], target: nil)
            suite.note("daemonMemory.\(transport.rawValue)", daemon.memory()?.json ?? .null)
            await connection.close()
        }
    }
}
