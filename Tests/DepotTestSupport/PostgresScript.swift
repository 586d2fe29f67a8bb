import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `scripts/postgres.sh`, the project's throwaway PostgreSQL, as the PostgreSQL tests and the
/// benchmarks run it.
///
/// It runs with posix_spawn and waitpid: Foundation's `Process.waitUntilExit` was seen to hang
/// after the script had exited (its child, the postmaster, lives on).
public enum PostgresScript {
    /// The script exited with a failure, or could not be run.
    public struct Failure: Error, CustomStringConvertible {
        /// What it was asked (`start`, `stop`, …).
        public let command: String
        /// Its exit status, or the failing call's errno.
        public let status: Int32
        /// What it printed, or what went wrong.
        public let output: String

        /// A failure of `command`.
        public init(command: String, status: Int32, output: String) {
            self.command = command
            self.status = status
            self.output = output
        }

        public var description: String {
            "scripts/postgres.sh \(command) exited with \(status): \(output)\n"
                + "PostgreSQL is needed here: run `make setup-system` (Debian's postgresql package)"
        }
    }

    /// The script in this checkout.
    public static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/postgres.sh").path

    /// Runs `postgres.sh command directory` with `environment` added to this process's, and
    /// returns everything it printed (standard output and error).
    public static func run(_ command: String, _ directory: URL, environment: [String: String] = [:]) throws
        -> String
    {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("depot-postgres-\(UUID()).out")
        defer { try? FileManager.default.removeItem(at: output) }
        let arguments = [
            "/bin/bash", "-c", "exec /bin/bash \"$0\" \"$1\" \"$2\" >\"$3\" 2>&1 </dev/null",
            path, command, directory.path, output.path,
        ]
        let variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0)=\($1)" }
        let cArguments = arguments.map { strdup($0) } + [nil]
        let cVariables = variables.map { strdup($0) } + [nil]
        defer { (cArguments + cVariables).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/bash", nil, nil, cArguments, cVariables)
        guard spawned == 0 else { throw Failure(command: command, status: spawned, output: "posix_spawn failed") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw Failure(command: command, status: errno, output: "waitpid failed") }
        }
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        // WIFEXITED and WEXITSTATUS, which Glibc's module does not export.
        let exited = status & 0x7f == 0
        let exitStatus = exited ? (status >> 8) & 0xff : 128 + status & 0x7f
        guard exitStatus == 0 else { throw Failure(command: command, status: exitStatus, output: text) }
        return text
    }

    /// The URL the script printed last (`start`, `url`); the lines before it are messages.
    public static func url(in output: String) -> String {
        output.split(separator: "\n").last.map(String.init) ?? ""
    }
}
