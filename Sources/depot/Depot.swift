import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

/// `depot`: the command-line client of `depotd`.
@main
struct Depot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract: "Talk to a running depotd: call any method, ping.",
        version: "0.1.0",
        subcommands: [Call.self, PingCommand.self])
}

/// Where to find the daemon; shared by every subcommand.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("connect"), help: "The daemon's endpoint (default: ipc://<data-dir>/depot.sock).")
    var endpoint: String?

    @Option(name: .customLong("data-dir"), help: "The daemon's data directory, for the default endpoint.")
    var dataDirectory = "./depot-data"

    @Option(help: "Seconds to wait for an answer.")
    var timeout = 10.0

    /// The endpoint to use: `--connect`, or the daemon's default for `--data-dir`.
    var resolvedEndpoint: String {
        endpoint ?? "ipc://" + URL(fileURLWithPath: dataDirectory).standardizedFileURL.appendingPathComponent("depot.sock").path
    }

    /// Connects, turning failures into a message for people.
    func connect() async throws -> DepotConnection {
        let endpoint = resolvedEndpoint
        if endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst("ipc://".count))
            guard FileManager.default.fileExists(atPath: path) else {
                throw CLIError("no daemon at \(endpoint): the socket file does not exist. Start one with `make run` or `depotd --data-dir \(dataDirectory)`")
            }
        }
        do {
            return try await DepotConnection.connect(
                to: endpoint, clientInfo: ImplementationInfo(name: "depot", version: "0.1.0"), timeout: .milliseconds(Int64(timeout * 1000)))
        } catch {
            throw CLIError("cannot connect to \(endpoint): \(error)")
        }
    }
}

/// An error whose message is all a person needs.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `depot call METHOD [JSON]`.
struct Call: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Call a method and print its result as JSON.",
        discussion: """
            Examples:
              depot call model/get
              depot call store/fetch '{"entity": "Team", "sort": [{"key": "wins", "ascending": false}]}'
              echo '{"entity": "Team"}' | depot call store/count -
            On a JSON-RPC error the error object goes to standard error and the exit status is 1.
            """)

    @OptionGroup var connection: ConnectionOptions

    @Argument(help: "The method, e.g. store/fetch.")
    var method: String

    @Argument(help: "The params as a JSON object, or - to read them from standard input.")
    var params: String?

    func run() async throws {
        var json: JSONValue?
        if let params {
            let text = params == "-" ? String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self) : params
            do {
                json = try JSONParser.parse(text)
            } catch {
                throw CLIError("params are not valid JSON (\(error)): \(text.prefix(80))")
            }
        }
        let client = try await connection.connect()
        defer { client.abort() }
        do {
            let result = try await client.call(method: method, params: json)
            print(JSONWriter.encodePretty(result))
        } catch let error {
            if case .server(let rpcError) = error {
                let body = (try? JSONCoding.encode(rpcError)) ?? .string(rpcError.message)
                FileHandle.standardError.write(Data((JSONWriter.encodePretty(body) + "\n").utf8))
                throw ExitCode(1)
            }
            throw CLIError("\(error)")
        }
    }
}

/// `depot ping`.
struct PingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ping", abstract: "Check that the daemon answers, and how fast.")

    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        let client = try await connection.connect()
        defer { client.abort() }
        let start = ContinuousClock.now
        do {
            _ = try await client.call(Ping.self, Empty())
        } catch {
            throw CLIError("ping failed: \(error)")
        }
        let elapsed = ContinuousClock.now - start
        print("pong from \(client.serverInfo.serverInfo.name) \(client.serverInfo.serverInfo.version) at \(client.endpoint) in \(elapsed)")
    }
}
