import DepotPostgres
import Foundation
import Glibc

/// A PostgreSQL server from `scripts/postgres.sh`, fsync on, stopped by ``stop()``.
struct ThrowawayPostgres {
    let directory: URL
    let url: PostgresURL
    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("scripts/postgres.sh")

    init(directory: URL) throws {
        self.directory = directory
        let output = try Self.run("start", directory)
        guard let line = output.split(separator: "\n").last else { throw BenchmarkError("postgres.sh printed no URL") }
        url = try PostgresURL(String(line))
    }

    func stop() { _ = try? Self.run("stop", directory) }

    /// posix_spawn and waitpid: Foundation's Process.waitUntilExit was seen to hang after this
    /// script exited, its child the postmaster living on (Tests/DepotPostgresTests do the same).
    private static func run(_ command: String, _ directory: URL) throws -> String {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("depot-bench-pg-\(UUID()).out")
        defer { try? FileManager.default.removeItem(at: output) }
        let arguments = [
            "/bin/bash", "-c", "PG_FSYNC=on exec /bin/bash \"$0\" \"$1\" \"$2\" >\"$3\" 2>&1 </dev/null",
            script.path, command, directory.path, output.path,
        ]
        let cArguments = arguments.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, "/bin/bash", nil, nil, cArguments, environ) == 0 else {
            throw BenchmarkError("could not start scripts/postgres.sh")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        guard status == 0 else { throw BenchmarkError("scripts/postgres.sh \(command) failed: \(text)") }
        return text
    }
}
