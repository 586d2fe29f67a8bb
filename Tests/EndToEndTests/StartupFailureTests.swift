import DepotTestSupport
import Foundation
import XCTest

/// Every start-up failure prints its reason and exits non-zero at once, before
/// anything is bound (DESIGN.md §4): nothing hangs, nothing listens.
final class StartupFailureTests: XCTestCase {
    private var scratch: URL!

    override func setUpWithError() throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-startup-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: scratch)
    }

    /// Runs depotd with `arguments`; returns its exit status and standard error. Fails after 15 s.
    private func run(_ arguments: [String]) throws -> ProcessOutcome {
        try ProcessOutcome.run(Executables.depotd, arguments, timeout: .seconds(15))
    }

    private func writeModel(_ text: String) throws -> String {
        let path = scratch.appendingPathComponent("model-\(UUID().uuidString).json").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// A free loopback port, so that the test can check nothing was bound on it.
    private func freePort() throws -> Int {
        let daemon = try Daemon(dataDirectory: scratch.appendingPathComponent("probe"))
        let port = Int(daemon.endpoint.split(separator: ":").last!)!
        daemon.stop()
        return port
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    private func isListening(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    func testModelWithUnknownAttributeTypeStopsBeforeBinding() throws {
        let model = try writeModel(#"{"entities":[{"name":"A","attributes":[{"name":"x","type":"weird"}]}]}"#)
        let port = try freePort()
        let result = try run([
            "--data-dir", scratch.appendingPathComponent("d").path, "--model", model,
            "--listen", "tcp://127.0.0.1:\(port)",
        ])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("entities[0].attributes[0].type"), result.errors)
        XCTAssertTrue(result.errors.contains("\"weird\""), result.errors)
        XCTAssertTrue(result.errors.contains("string, integer, double"), result.errors)
        XCTAssertFalse(result.errors.contains("Cannot initialize"), result.errors)
        XCTAssertFalse(isListening(port))
    }

    func testModelWithReservedAttributeStopsBeforeBinding() throws {
        let model = try writeModel(#"{"entities":[{"name":"A","attributes":[{"name":"version","type":"string"}]}]}"#)
        let port = try freePort()
        let result = try run([
            "--data-dir", scratch.appendingPathComponent("d").path, "--model", model,
            "--listen", "tcp://127.0.0.1:\(port)",
        ])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("version"), result.errors)
        XCTAssertTrue(result.errors.contains("reserved"), result.errors)
        XCTAssertFalse(isListening(port))
    }

    func testMissingAndMalformedModelFiles() throws {
        var result = try run([
            "--data-dir", scratch.appendingPathComponent("d").path, "--model",
            scratch.appendingPathComponent("nope").path,
        ])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("No such file"), result.errors)
        result = try run([
            "--data-dir", scratch.appendingPathComponent("d").path, "--model", try writeModel("{\"entities\": ["),
        ])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("not JSON"), result.errors)
    }

    /// A `--log-retention` or `--log-grace` that does not parse stops the daemon, naming the flag,
    /// whatever the store (SQLite here).
    func testBadLogRetentionAndGrace() throws {
        for arguments in [["--log-retention", "lots"], ["--log-grace", "100000"], ["--log-grace", "1GB"]] {
            let result = try run(["--data-dir", scratch.appendingPathComponent("d").path] + arguments)
            XCTAssertNotEqual(result.status, 0, "\(arguments)")
            XCTAssertTrue(result.errors.contains(arguments[0]), "\(arguments): \(result.errors)")
        }
    }

    func testBadListenEndpoints() throws {
        for endpoint in ["tcp://127.0.0.1:notaport", "tcp://127.0.0.1:99999", "carrier-pigeon://x"] {
            let result = try run(["--data-dir", scratch.appendingPathComponent("d").path, "--listen", endpoint])
            XCTAssertNotEqual(result.status, 0, endpoint)
            XCTAssertTrue(result.errors.contains(endpoint), "\(endpoint): \(result.errors)")
        }
    }

    func testPortAlreadyInUse() throws {
        let first = try Daemon(dataDirectory: scratch.appendingPathComponent("first"))
        let result = try run(["--data-dir", scratch.appendingPathComponent("second").path, "--listen", first.endpoint])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("Address already in use"), result.errors)
        XCTAssertEqual(first.stop(), 0)
    }

    func testUnusableDataDirectory() throws {
        let file = scratch.appendingPathComponent("plain-file")
        try "x".write(to: file, atomically: true, encoding: .utf8)
        let result = try run(["--data-dir", file.appendingPathComponent("sub").path])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("is not a directory"), result.errors)
        let again = try run(["--data-dir", file.path])
        XCTAssertNotEqual(again.status, 0)
        XCTAssertTrue(again.errors.contains(file.path), again.errors)
    }

    func testDataDirectoryHeldByAnotherDaemon() throws {
        let directory = scratch.appendingPathComponent("shared")
        let first = try Daemon(dataDirectory: directory)
        let result = try run(["--data-dir", directory.path, "--listen", "tcp://127.0.0.1:0"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.errors.contains("in use by another depotd"), result.errors)
        XCTAssertTrue(result.errors.contains("pid \(first.process.processIdentifier)"), result.errors)
        // The first daemon is untouched and still answers.
        let raw = try RawClient(endpoint: first.endpoint)
        XCTAssertEqual(try raw.call("ping")["result"], [:])
        XCTAssertEqual(first.stop(), 0)
        // Once it stopped, the directory can be served again.
        let second = try Daemon(dataDirectory: directory)
        XCTAssertEqual(second.stop(), 0)
    }
}
