import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

/// Where to find the daemon; shared by every subcommand.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("connect"), help: "The daemon's endpoint (default: ipc://<data-dir>/depot.sock).")
    var endpoint: String?

    @Option(name: .customLong("data-dir"), help: "The daemon's data directory, for the default endpoint.")
    var dataDirectory = "./depot-data"

    @Option(help: "Seconds to wait for an answer.")
    var timeout = 10.0

    @Option(
        name: .customLong("server-key"),
        help: "The daemon's CURVE public key (Z85) or its .pub file, for a daemon that requires keys.")
    var serverKey: String?

    @Option(
        name: .customLong("key"), help: "This client's CURVE secret key file (NAME.key from `depot keys generate`).")
    var keyFile: String?

    /// The CURVE keys given, or `nil` when neither option was.
    func clientKeys() throws -> ClientKeys? {
        switch (serverKey, keyFile) {
        case (nil, nil): return nil
        case (let server?, let key?):
            do {
                return try ClientKeys(serverKey: server, keyFile: key)
            } catch {
                throw CLIError("\(error)".replacingOccurrences(of: "invalid response: ", with: ""))
            }
        default: throw CLIError("--server-key and --key go together")
        }
    }

    /// The endpoint to use: `--connect`, or the daemon's default for `--data-dir`.
    var resolvedEndpoint: String {
        endpoint ?? "ipc://"
            + URL(fileURLWithPath: dataDirectory).standardizedFileURL.appendingPathComponent("depot.sock").path
    }

    /// Connects, turning failures into a message for people.
    func connect() async throws -> DepotConnection {
        let endpoint = resolvedEndpoint
        guard endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("tcp://") else {
            throw CLIError("bad endpoint '\(endpoint)': use ipc://PATH or tcp://HOST:PORT")
        }
        if endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst("ipc://".count))
            guard FileManager.default.fileExists(atPath: path) else {
                throw CLIError(
                    "no daemon at \(endpoint): the socket file does not exist. Start one with `make run` or `depotd --data-dir \(dataDirectory)`"
                )
            }
        }
        let keys = try clientKeys()
        do {
            return try await DepotConnection.connect(
                to: endpoint, clientInfo: ImplementationInfo(name: "depot", version: "0.1.0"),
                timeout: .milliseconds(Int64(timeout * 1000)), keys: keys)
        } catch {
            if case .timedOut = error {
                throw CLIError("no daemon answered at \(endpoint) within \(timeout)s: is depotd running there?")
            }
            throw CLIError("cannot connect to \(endpoint): \(error)")
        }
    }
}
