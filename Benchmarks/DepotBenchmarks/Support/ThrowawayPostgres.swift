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

    /// The postmaster's process id (`data/postmaster.pid`), nil if it cannot be read.
    var serverPID: Int32? {
        guard
            let text = try? String(
                contentsOfFile: directory.appendingPathComponent("data/postmaster.pid").path, encoding: .utf8)
        else { return nil }
        return text.split(separator: "\n").first.flatMap { Int32($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// CPU seconds so far of the server: the postmaster and every process it started that is still
    /// running (each connection's backend); nil if it is not running.
    func cpuSeconds() -> Double? {
        guard let postmaster = serverPID, var total = CPUTime.process(postmaster) else { return nil }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for entry in entries {
            guard let pid = Int32(entry), pid != postmaster,
                let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // Field 4, the parent, is the second after the command name.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == postmaster { total += CPUTime.process(pid) ?? 0 }
        }
        return total
    }

    private static func run(_ command: String, _ directory: URL) throws -> String {
        try PostgresScript.run(command, directory, environment: ["PG_FSYNC": "on"])
    }
}
