import Foundation

/// The Depot executables the tests run: those built beside the test bundle, or `$DEPOTD` and `$DEPOT`.
public enum Executables {
    /// The daemon, `depotd` (or `$DEPOTD`).
    public static var depotd: URL { executable("depotd", environment: "DEPOTD") }

    /// The command-line tool, `depot` (or `$DEPOT`, else the one beside ``depotd``).
    public static var depot: URL {
        if let path = ProcessInfo.processInfo.environment["DEPOT"] { return URL(fileURLWithPath: path) }
        return depotd.deletingLastPathComponent().appendingPathComponent("depot")
    }

    /// The offline example program, `OfflineExample` (or `$DEPOT_OFFLINE_EXAMPLE`, else the one beside
    /// ``depotd``): the child client that tests kill while it waits with a queued save.
    public static var offlineExample: URL {
        if let path = ProcessInfo.processInfo.environment["DEPOT_OFFLINE_EXAMPLE"] {
            return URL(fileURLWithPath: path)
        }
        return depotd.deletingLastPathComponent().appendingPathComponent("OfflineExample")
    }

    private static func executable(_ name: String, environment variable: String) -> URL {
        if let path = ProcessInfo.processInfo.environment[variable] { return URL(fileURLWithPath: path) }
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        if directory.lastPathComponent.hasSuffix(".xctest") { directory = directory.deletingLastPathComponent() }
        let candidate = directory.appendingPathComponent(name)
        if FileManager.default.fileExists(atPath: candidate.path) { return candidate }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(
            ".build/debug/\(name)")
    }
}

/// What a process run to its end printed, and its exit status.
public struct ProcessOutcome: Sendable {
    /// The exit status.
    public var status: Int32
    /// What it wrote to standard output.
    public var output: String
    /// What it wrote to standard error.
    public var errors: String

    /// Runs `executable` with `arguments`, `input` on its standard input, and waits for its exit.
    ///
    /// - Throws: ``DaemonError/didNotExit(_:)`` after killing it when it still runs after `timeout`.
    public static func run(
        _ executable: URL, _ arguments: [String], input: String? = nil, timeout: Duration = .seconds(30)
    ) throws -> ProcessOutcome {
        // Files rather than pipes: a child that writes much to both streams cannot block on a full pipe.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let outputFile = scratch.appendingPathComponent("stdout")
        let errorsFile = scratch.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorsFile.path, contents: nil)
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: outputFile)
        process.standardError = try FileHandle(forWritingTo: errorsFile)
        let stdin = Pipe()
        process.standardInput = stdin
        try process.run()
        if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
        try stdin.fileHandleForWriting.close()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw DaemonError.didNotExit([executable.lastPathComponent] + arguments)
        }
        process.waitUntilExit()
        return ProcessOutcome(
            status: process.terminationStatus,
            output: (try? String(contentsOf: outputFile, encoding: .utf8)) ?? "",
            errors: (try? String(contentsOf: errorsFile, encoding: .utf8)) ?? "")
    }
}
