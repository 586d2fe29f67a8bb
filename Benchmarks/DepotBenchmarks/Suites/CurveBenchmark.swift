import DepotClient
import DepotProtocol
import Foundation
import ZeroMQ

/// What CURVE costs: `ping` round trips and single-object `store/save`
/// commits over TCP, to a daemon with keys (CURVE, ZAP, role checks) against
/// the same daemon build without keys, in one run. Both sides use the same raw
/// DEALER (``RawRPCClient``), so the ratio is CURVE's encryption and the role check.
struct CurveBenchmark: Benchmark {
    static let name = "curve"
    static let summary = "ping and save over tcp: depotd with CURVE keys vs without (ratio reported; no target)"

    func run(_ suite: SuiteRun) async throws {
        let server = try CurveKeyPair.generate()
        let client = try CurveKeyPair.generate()
        let admin = try CurveKeyPair.generate()
        let keyFile = suite.directory.appendingPathComponent("server.key")
        let authorized = suite.directory.appendingPathComponent("authorized_keys")
        try "\(server.secretKey)\n".write(to: keyFile, atomically: true, encoding: .utf8)
        try "\(client.publicKey) write bench\n\(admin.publicKey) admin setup\n".write(
            to: authorized, atomically: true, encoding: .utf8)

        let plain = try suite.startDaemon(.tcp, label: "depotd-plain")
        defer { plain.stop() }
        let keyed = try DaemonProcess(
            executable: suite.options.depotd, dataDirectory: suite.directory.appendingPathComponent("depotd-curve"),
            transport: .tcp,
            extraArguments: suite.options.daemonArguments + [
                "--curve-secret-key", keyFile.path, "--authorized-keys", authorized.path,
            ])
        defer { keyed.stop() }

        let plainRPC = try RawRPCClient(endpoint: plain.endpoint)
        let keyedRPC = try RawRPCClient(
            endpoint: keyed.endpoint, curve: (server.publicKey, client.publicKey, client.secretKey))
        for rpc in [plainRPC, keyedRPC] {
            try rpc.initialize()
        }
        _ = try plainRPC.call("model/define", params: BenchmarkModel.defineParams)
        let adminRPC = try RawRPCClient(
            endpoint: keyed.endpoint, curve: (server.publicKey, admin.publicKey, admin.secretKey))
        try adminRPC.initialize()
        _ = try adminRPC.call("model/define", params: BenchmarkModel.defineParams)

        let measured = try await suite.sampler.measure([
            BenchmarkCase("curve.ping.plain", unit: "round trip", daemon: plain.pid) { iteration in
                try plainRPC.roundTrip(RawRPCClient.request(id: Int64(iteration) + 10, method: "ping"))
            },
            BenchmarkCase("curve.ping.curve", unit: "round trip", daemon: keyed.pid) { iteration in
                try keyedRPC.roundTrip(RawRPCClient.request(id: Int64(iteration) + 10, method: "ping"))
            },
            BenchmarkCase("curve.save.plain", unit: "commit", daemon: plain.pid) { iteration in
                try plainRPC.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 10, method: "store/save",
                        params: BenchmarkModel.insertItemParams(iteration)))
            },
            BenchmarkCase("curve.save.curve", unit: "commit", daemon: keyed.pid) { iteration in
                try keyedRPC.roundTrip(
                    RawRPCClient.request(
                        id: Int64(iteration) + 10, method: "store/save",
                        params: BenchmarkModel.insertItemParams(iteration)))
            },
        ])
        suite.record(measured)
        suite.compare("curve.ping", measured[1], to: measured[0], target: nil)
        suite.compare("curve.save", measured[3], to: measured[2], target: nil)
    }
}
