import DepotPostgres
import DepotTestSupport
import Foundation

/// A PostgreSQL server from `scripts/postgres.sh`, fsync on (a commit's flush costs what it costs
/// in production), stopped by ``stop()``.
struct ThrowawayPostgres {
    let directory: URL
    let url: PostgresURL

    init(directory: URL) throws {
        self.directory = directory
        url = try PostgresURL(PostgresScript.url(in: try Self.run("start", directory)))
    }

    func stop() { _ = try? Self.run("stop", directory) }

    private static func run(_ command: String, _ directory: URL) throws -> String {
        try PostgresScript.run(command, directory, environment: ["PG_FSYNC": "on"])
    }
}
