import ArgumentParser
import DepotClient
import DepotProtocol

/// `depot ping`.
struct PingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ping", abstract: "Check that the daemon answers, and how fast.")

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
        print(
            "pong from \(client.serverInfo.serverInfo.name) \(client.serverInfo.serverInfo.version) at \(client.endpoint) in \(elapsed)"
        )
    }
}
