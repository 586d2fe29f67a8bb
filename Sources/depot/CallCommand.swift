import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

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

    @Flag(help: "Print the result on one line (compact JSON).")
    var json = false

    func run() async throws {
        let parsed = try params.map { try parseJSONArgument($0, what: "params") }
        if let parsed, parsed.objectValue == nil {
            throw CLIError("params must be a JSON object (named params), got \(parsed.typeName): \(parsed.excerpt())")
        }
        let client = try await connection.connect()
        defer { client.abort() }
        do {
            let result = try await client.call(method: method, params: parsed)
            print(json ? jsonLine(result) : JSONWriter.encodePretty(result))
        } catch let error {
            if case .server(let rpcError) = error {
                let body = (try? JSONCoding.encode(rpcError)) ?? .string(rpcError.message)
                printError(JSONWriter.encodePretty(body))
                throw ExitCode(1)
            }
            throw CLIError("\(error)")
        }
    }
}
