import Foundation

/// A `perf record -g` of one process for the length of one benchmark phase, and a
/// summary of where its CPU went: by thread, and the hottest symbols
/// (`--profile`; `perf` must be installed and allowed to attach).
final class PhaseProfile {
    private var recorder: pid_t = 0
    /// The perf data file, kept after the run (`perf report -i FILE`).
    let file: URL

    /// Starts recording `pid` into `directory/<phase>.perf.data`.
    init(pid: Int32, phase: String, directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        file = directory.appendingPathComponent("\(phase).perf.data")
        // Spawned with no signal blocked: a thread of this process blocks most signals, and a child
        // started by `Process` inherits that mask, so perf would never see the SIGINT that stops it.
        let arguments = ["perf", "record", "-q", "-F", "499", "-g", "-p", String(pid), "-o", file.path]
        var argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let status = posix_spawn(&recorder, "/usr/bin/perf", nil, &attributes, argv, environ)
        guard status == 0 else { throw BenchmarkError("cannot start perf: \(String(cString: strerror(status)))") }
        usleep(300_000)  // perf attaches to every thread before the phase starts
    }

    /// Stops recording and returns the summary: CPU share by thread, then by thread and symbol
    /// (self time, entries of at least 1.5%).
    func stop() -> [String] {
        kill(recorder, SIGINT)
        var status: Int32 = 0
        waitpid(recorder, &status, 0)
        let threads = Self.report(file, sort: "comm", limit: 8)
        let symbols = Self.report(file, sort: "comm,dso,symbol", limit: 25)
        return ["by thread:"] + threads + ["by thread, library, symbol (self):"] + symbols
    }

    private static func report(_ file: URL, sort: String, limit: Int) -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/perf")
        process.arguments = [
            "report", "-i", file.path, "--stdio", "--no-children", "-g", "none", "--sort", sort,
            "--percent-limit", "1.5",
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return ["(perf report failed)"] }
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let lines = text.split(separator: "\n").filter {
            !$0.hasPrefix("#") && !$0.trimmingCharacters(in: .whitespaces).isEmpty
        }
        return lines.prefix(limit).map { $0.trimmingCharacters(in: .whitespaces) }
    }
}
