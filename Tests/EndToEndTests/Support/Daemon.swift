import DepotClient
import DepotProtocol
import Foundation
import XCTest

/// A real `depotd` process on a temporary data directory and a loopback TCP
/// port, for end-to-end tests. Stopped (SIGTERM) and its directory removed on deinit.
final class Daemon: @unchecked Sendable {
    let process = Process()
    let dataDirectory: URL
    private(set) var endpoint = ""
    private let output = Pipe()
    private let errors = Pipe()

    /// The `depotd` built beside the test bundle (or `$DEPOTD`).
    static var executable: URL {
        if let path = ProcessInfo.processInfo.environment["DEPOTD"] { return URL(fileURLWithPath: path) }
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        if directory.lastPathComponent.hasSuffix(".xctest") { directory = directory.deletingLastPathComponent() }
        let candidate = directory.appendingPathComponent("depotd")
        if FileManager.default.fileExists(atPath: candidate.path) { return candidate }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(
            ".build/debug/depotd")
    }

    /// The repository's `Tests/Fixtures` folder.
    static var fixtures: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Fixtures")
    }

    /// Starts a daemon and waits until it listens (on `listen`, a fresh loopback port by default).
    init(
        dataDirectory: URL? = nil, arguments: [String] = [], heartbeat: Double? = nil,
        listen: String = "tcp://127.0.0.1:*", environment: [String: String] = [:]
    ) throws {
        self.dataDirectory =
            dataDirectory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("depot-e2e-\(UUID().uuidString)")
        process.executableURL = Self.executable
        var arguments =
            ["--data-dir", self.dataDirectory.path, "--listen", listen, "--log-level", "warning"] + arguments
        if let heartbeat { arguments += ["--heartbeat-interval", String(heartbeat)] }
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        endpoint = try waitForEndpoint()
    }

    private func waitForEndpoint() throws -> String {
        let handle = output.fileHandleForReading
        var text = ""
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let data = handle.availableData
            if data.isEmpty {
                if !process.isRunning { break }
                continue
            }
            text += String(decoding: data, as: UTF8.self)
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("depotd listening on ") }) {
                return String(line.dropFirst("depotd listening on ".count))
            }
        }
        let stderr = String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self)
        throw NSError(
            domain: "Daemon", code: 1, userInfo: [NSLocalizedDescriptionKey: "depotd did not start: \(text) \(stderr)"])
    }

    /// A new client session.
    func connect(name: String = "e2e") async throws -> DepotConnection {
        try await DepotConnection.connect(
            to: endpoint, clientInfo: ImplementationInfo(name: name, version: "1"), timeout: .seconds(30))
    }

    /// Sends `signal` and waits for the exit; returns the exit status.
    @discardableResult
    func stop(signal: Int32 = SIGTERM) -> Int32 {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        return process.terminationStatus
    }

    deinit {
        stop(signal: SIGKILL)
    }

    /// Removes the data directory (after ``stop(signal:)``).
    func removeData() { try? FileManager.default.removeItem(at: dataDirectory) }
}

/// The World Cup model and teams from `Tests/Fixtures/worldcup.json`.
enum WorldCup {
    static var json: JSONValue {
        let data = try! Data(contentsOf: Daemon.fixtures.appendingPathComponent("worldcup.json"))
        return try! JSONParser.parse(Array(data))
    }

    static var model: [EntityDescription] {
        try! JSONCoding.decode([EntityDescription].self, from: json["model"]!["entities"]!)
    }

    static var teams: [[String: JSONValue]] { json["teams"]!.arrayValue!.map { $0.objectValue! } }

    /// The seed's Item entity beside the teams.
    static var item: EntityDescription {
        EntityDescription(
            name: "Item",
            attributes: [
                AttributeDescription(name: "name", type: .string),
                AttributeDescription(name: "createdAt", type: .date),
                AttributeDescription(name: "done", type: .boolean, defaultValue: false),
            ])
    }
}

extension DepotConnection {
    /// Defines the World Cup model plus Item and inserts every team; returns their ids by name.
    @discardableResult
    func loadWorldCup() async throws -> [String: String] {
        _ = try await call(ModelDefine.self, .init(entities: WorldCup.model + [WorldCup.item]))
        let inserts = WorldCup.teams.map {
            InsertedObject(entity: "Team", tempId: $0["teamName"]!.stringValue!, values: $0)
        }
        return try await call(StoreSave.self, .init(inserted: inserts)).ids
    }
}

/// Asserts that `body` fails with a server error of `code`; returns the error.
@discardableResult
func assertServerError<T>(
    _ code: ErrorCode, file: StaticString = #filePath, line: UInt = #line, _ body: () async throws -> T
) async -> RPCError? {
    do {
        _ = try await body()
        XCTFail("expected server error \(code.rawValue)", file: file, line: line)
    } catch let error as DepotClientError {
        guard case .server(let rpcError) = error else {
            XCTFail("expected server error \(code.rawValue), got \(error)", file: file, line: line)
            return nil
        }
        XCTAssertEqual(rpcError.code, code, rpcError.message, file: file, line: line)
        return rpcError
    } catch {
        XCTFail("unexpected \(error)", file: file, line: line)
    }
    return nil
}
