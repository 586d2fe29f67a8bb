import Foundation
import Glibc

/// `perf record -g` attached to a process until ``stop()``: for one phase of a suite when the
/// environment variable `DEPOT_BENCH_PERF` names a directory (``init(pid:label:)``), or always
/// into a given file (``init(pid:file:frequency:)``, what ``PhaseProfile`` summarizes).
/// Read a profile with `perf report -i FILE`.
final class PerfRecorder {
    private var child: pid_t = 0
    /// Where the profile goes; `nil` when nothing is recorded.
    let file: URL?

    /// Starts recording `pid` into `DIR/<label>.data` if `DEPOT_BENCH_PERF` names a directory `DIR`
    /// (and `perf` starts); records nothing otherwise.
    init(pid: Int32, label: String) {
        guard let directory = ProcessInfo.processInfo.environment["DEPOT_BENCH_PERF"], !directory.isEmpty else {
            file = nil
            return
        }
        let file = URL(fileURLWithPath: directory).appendingPathComponent("\(label).data")
        self.file = file
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        child = Self.spawn(pid: pid, file: file, frequency: nil) ?? 0
        // perf needs a moment to attach to every thread before the phase starts.
        if child > 0 { usleep(500_000) }
    }

    /// Starts recording `pid` into `file`, `frequency` samples a second (perf's default when `nil`).
    ///
    /// - Throws: when `perf` cannot be started.
    init(pid: Int32, file: URL, frequency: Int? = nil) throws {
        self.file = file
        try FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        guard let child = Self.spawn(pid: pid, file: file, frequency: frequency) else {
            throw BenchmarkError("cannot start perf record for process \(pid)")
        }
        self.child = child
        usleep(300_000)
    }

    /// Stops recording (SIGINT, as Ctrl-C) and waits for `perf` to write its file.
    func stop() {
        guard child > 0 else { return }
        kill(child, SIGINT)
        var status: Int32 = 0
        waitpid(child, &status, 0)
        child = 0
    }

    /// `perf record` of `pid` into `file`, or `nil` when it cannot be spawned.
    private static func spawn(pid: Int32, file: URL, frequency: Int?) -> pid_t? {
        let arguments =
            ["perf", "record", "-q", "-g"] + (frequency.map { ["-F", String($0)] } ?? [])
            + ["-p", String(pid), "-o", file.path]
        // Spawned with no signal blocked and every signal at its default: a child started from a
        // Swift concurrency thread (or by `Process`) inherits its blocked signals, and perf would
        // never see the SIGINT that stops it.
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
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var spawned: pid_t = 0
        guard posix_spawnp(&spawned, "perf", nil, &attributes, argv, environ) == 0 else { return nil }
        return spawned
    }
}
