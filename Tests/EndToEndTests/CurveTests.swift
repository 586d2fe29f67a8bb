import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// CURVE keys and roles over real sockets (DESIGN.md §2): no key and unknown
/// keys never complete the handshake, each role gets exactly its method groups,
/// SIGHUP revokes, and a non-loopback bind is served only with keys (connecting
/// over 127.0.0.1 only).
final class CurveTests: XCTestCase {
    /// The roles of DESIGN.md §2, in order of what they allow.
    enum Role: Int, Comparable {
        case read, write, admin
        var name: String { ["read", "write", "admin"][rawValue] }
        static func < (lhs: Role, rhs: Role) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    var directory: URL!
    var server: CurveKeyPair!
    var clients: [String: CurveKeyPair] = [:]
    var daemon: Daemon!

    var keysFile: URL { directory.appendingPathComponent("authorized_keys") }

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-curve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        server = try CurveKeyPair.generate()
        for name in ["reader", "writer", "admin", "stranger"] { clients[name] = try CurveKeyPair.generate() }
        try "# the daemon's secret key\n\(server.secretKey)\n".write(
            to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        try writeKeys(["reader": "read", "writer": "write", "admin": "admin"])
    }

    override func tearDownWithError() throws {
        if let daemon { XCTAssertEqual(daemon.stop(), 0) }
        daemon = nil
        try? FileManager.default.removeItem(at: directory)
    }

    private func writeKeys(_ roles: [String: String]) throws {
        var text = "# public key, role, name\n"
        for (name, role) in roles.sorted(by: { $0.key < $1.key }) {
            text += "\(clients[name]!.publicKey) \(role) \(name)  # added by the test\n"
        }
        try text.write(to: keysFile, atomically: true, encoding: .utf8)
    }

    private func startDaemon(listen: String = "tcp://127.0.0.1:*") throws {
        daemon = try Daemon(
            dataDirectory: directory.appendingPathComponent("data"),
            arguments: [
                "--curve-secret-key", directory.appendingPathComponent("server.key").path,
                "--authorized-keys", keysFile.path,
            ], listen: listen)
    }

    /// The daemon's TCP endpoint, always reached over 127.0.0.1.
    private var loopbackEndpoint: String {
        daemon.endpoint.replacingOccurrences(of: "0.0.0.0", with: "127.0.0.1")
    }

    private func raw(_ name: String?, timeout: Int32 = 5000) throws -> RawClient {
        try RawClient(
            endpoint: loopbackEndpoint, curve: name.map { (server.publicKey, clients[$0]!) }, receiveTimeout: timeout)
    }

    private func connect(_ name: String) async throws -> DepotConnection {
        try await DepotConnection.connect(
            to: loopbackEndpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(10),
            keys: try ClientKeys(serverKey: server.publicKey, secretKey: clients[name]!.secretKey))
    }

    func testNoKeyAndUnknownKeyNeverGetIn() async throws {
        try startDaemon()
        let plain = try raw(nil, timeout: 1500)
        try plain.send(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        XCTAssertNil(try plain.receiveIfAny(), "a client without a key gets nothing")
        let stranger = try raw("stranger", timeout: 1500)
        try stranger.send(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        XCTAssertNil(try stranger.receiveIfAny(), "an unknown key never completes the handshake")
        // The typed client says why instead of timing out.
        let started = ContinuousClock.now
        await assertServerError(.forbidden) { try await self.connect("stranger") }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(8))
        // A listed key gets in.
        let reader = try raw("reader")
        XCTAssertEqual(try reader.call("ping")["result"], [:])
    }

    static let item =
        #"{"name":"Item","attributes":[{"name":"name","type":"string"},{"name":"createdAt","type":"date"},{"name":"done","type":"boolean","default":false}]}"#

    /// One request per method group, with params good enough to pass the role check.
    static let probes: [(method: String, params: String, role: Role)] = [
        ("model/get", "{}", .read),
        ("store/fetch", #"{"entity":"Item"}"#, .read),
        ("store/count", #"{"entity":"Item"}"#, .read),
        ("store/get", #"{"ids":["Item/1"]}"#, .read),
        ("store/history", #"{"since":0}"#, .read),
        ("store/observe", "{}", .read),
        ("results/subscribe", #"{"request":{"entity":"Item","sort":[{"key":"name"}]}}"#, .read),
        (
            "store/save",
            #"{"inserted":[{"entity":"Item","values":{"name":"x","createdAt":"2026-01-01T00:00:00.000Z"}}]}"#, .write
        ),
        (
            "store/batchInsert", #"{"entity":"Item","objects":[{"name":"y","createdAt":"2026-01-01T00:00:00.000Z"}]}"#,
            .write
        ),
        ("store/batchUpdate", #"{"entity":"Item","predicate":"name == 'nobody'","values":{"done":true}}"#, .write),
        ("store/batchDelete", #"{"entity":"Item","predicate":"name == 'nobody'"}"#, .write),
        ("results/deleteCache", "{}", .admin),
        ("model/define", #"{"entities":[\#(item)]}"#, .admin),
    ]

    func testEachRoleAgainstEveryMethodGroup() async throws {
        try startDaemon()
        let admin = try raw("admin")
        try admin.initialize()
        XCTAssertNil(try admin.call("model/define", #"{"entities":[\#(Self.item)]}"#)["error"])
        for (name, role) in [("reader", Role.read), ("writer", .write), ("admin", .admin)] {
            let client = try raw(name)
            try client.initialize()
            for (index, probe) in Self.probes.enumerated() {
                let response = try client.call(probe.method, probe.params, id: index + 10)
                if probe.role <= role {
                    XCTAssertNil(response["error"], "\(name) may call \(probe.method): \(response)")
                } else {
                    XCTAssertEqual(response["error"]?["code"], -32018, "\(name) calling \(probe.method)")
                    let message = response["error"]?["message"]?.stringValue ?? ""
                    XCTAssertTrue(message.contains(probe.method) && message.contains("'\(role.name)'"), message)
                    XCTAssertEqual(response["error"]?["data"]?["role"]?.stringValue, role.name)
                }
            }
        }
        // What the reader was refused left nothing behind: only the writer's and admin's saves committed.
        let count = try admin.call("store/count", #"{"entity":"Item"}"#)["result"]?["count"]
        XCTAssertEqual(count, 4, "two inserts each by writer and admin, none by reader")
        // A batch mixing allowed and forbidden requests answers each on its own.
        let reader = try raw("reader")
        try reader.initialize()
        try reader.send(
            #"[{"jsonrpc":"2.0","id":1,"method":"store/count","params":{"entity":"Item"}},{"jsonrpc":"2.0","id":2,"method":"store/batchDelete","params":{"entity":"Item"}}]"#
        )
        let answers = try reader.receive().arrayValue ?? []
        XCTAssertEqual(answers.first?["result"]?["count"], 4)
        XCTAssertEqual(answers.last?["error"]?["code"], -32018)
        XCTAssertEqual(try admin.call("store/count", #"{"entity":"Item"}"#)["result"]?["count"], 4)
    }

    func testTypedClientWithKeys() async throws {
        try startDaemon()
        let writer = try await connect("writer")
        defer { writer.abort() }
        _ = try await writer.call(Ping.self, Empty())
        let error = await assertServerError(.forbidden) {
            try await writer.call(ModelDefine.self, .init(entities: [WorldCup.item]))
        }
        XCTAssertTrue(error?.message.contains("model/define") == true, error?.message ?? "")
    }

    func testSIGHUPRevokesARemovedKeyAtOnce() async throws {
        try startDaemon()
        let writer = try raw("writer")
        try writer.initialize()
        XCTAssertEqual(try writer.call("ping")["result"], [:])
        let reader = try raw("reader")
        try reader.initialize()
        try writeKeys(["reader": "read", "admin": "admin"])
        kill(daemon.process.processIdentifier, SIGHUP)
        var code: JSONValue?
        for attempt in 0..<50 {
            code = try writer.call("model/get", id: 100 + attempt)["error"]?["code"]
            if code == -32018 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertEqual(code, -32018, "the removed key's requests are refused")
        XCTAssertEqual(try writer.call("ping", id: 999)["error"]?["code"], -32018, "even ping")
        // Its session was closed, the others go on, and the key cannot come back in.
        XCTAssertNil(try reader.call("model/get")["error"])
        let again = try raw("writer", timeout: 1500)
        try again.send(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        XCTAssertNil(try again.receiveIfAny(), "a new handshake with the removed key fails")
        // A file that does not parse keeps the keys in force.
        try "not a key file\n".write(to: keysFile, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        try await Task.sleep(for: .milliseconds(300))
        XCTAssertNil(try reader.call("model/get", id: 5)["error"])
    }

    func testNonLoopbackBindIsServedOnlyWithKeys() async throws {
        try startDaemon(listen: "tcp://0.0.0.0:*")
        XCTAssertTrue(daemon.endpoint.hasPrefix("tcp://0.0.0.0:"), daemon.endpoint)
        let reader = try raw("reader")
        XCTAssertEqual(try reader.call("ping")["result"], [:])
        let plain = try raw(nil, timeout: 1500)
        try plain.send(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        XCTAssertNil(try plain.receiveIfAny())
    }

    func testIPCStaysOpenToLocalProcessesWhileTCPNeedsKeys() throws {
        let socket = directory.appendingPathComponent("data/depot.sock").path
        daemon = try Daemon(
            dataDirectory: directory.appendingPathComponent("data"),
            arguments: [
                "--listen", "ipc://" + socket,
                "--curve-secret-key", directory.appendingPathComponent("server.key").path,
                "--authorized-keys", keysFile.path,
            ])
        // Both endpoints are printed, the plain one first.
        let endpoints = daemon.endpoint.split(separator: " ").map(String.init)
        XCTAssertEqual(endpoints.count, 2, daemon.endpoint)
        XCTAssertEqual(endpoints.first, "ipc://" + socket)
        let local = try RawClient(endpoint: "ipc://" + socket)
        try local.initialize()
        XCTAssertNil(
            try local.call("model/define", #"{"entities":[\#(Self.item)]}"#)["error"], "ipc sessions have every right")
        let tcp = try RawClient(endpoint: endpoints[1], receiveTimeout: 1500)
        try tcp.send(#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        XCTAssertNil(try tcp.receiveIfAny(), "tcp without a key gets nothing")
        let reader = try RawClient(endpoint: endpoints[1], curve: (server.publicKey, clients["reader"]!))
        XCTAssertEqual(try reader.call("ping")["result"], [:])
    }

    func testKeyOptionsAreCheckedAtStartUp() throws {
        for (arguments, expected) in [
            (["--curve-secret-key", directory.appendingPathComponent("server.key").path], "go together"),
            (
                ["--curve-secret-key", keysFile.path, "--authorized-keys", keysFile.path],
                "does not hold a Z85 key"
            ),
        ] {
            let outcome = try ProcessOutcome.run(
                Executables.depotd,
                ["--data-dir", directory.appendingPathComponent("d").path, "--listen", "tcp://0.0.0.0:0"] + arguments)
            XCTAssertNotEqual(outcome.status, 0)
            XCTAssertTrue(outcome.errors.contains(expected), outcome.errors)
        }
        try "\(clients["reader"]!.publicKey) superuser bob\n".write(to: keysFile, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try startDaemon()) { error in
            XCTAssertTrue("\(error)".contains("role 'superuser'"), "\(error)")
        }
    }
}
