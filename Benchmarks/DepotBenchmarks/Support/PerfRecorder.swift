import Foundation
import Glibc

/// `perf record -g` attached to a process for one phase of a suite, when the environment variable
/// `DEPOT_BENCH_PERF` names a directory: the profile goes to `DIR/<label>.data` (read it with
/// `perf report -i`). Without the variable, or without `perf`, it records nothing.
final class PerfRecorder {
    private var child: pid_t = 0

    /// Starts recording `pid` as `label`, if asked to.
    init(pid: Int32, label: String) {
        guard let directory = ProcessInfo.processInfo.environment["DEPOT_BENCH_PERF"], !directory.isEmpty else {
            return
        }
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let arguments = ["perf", "record", "-q", "-g", "-p", "\(pid)", "-o", "\(directory)/\(label).data"]
        // posix_spawn with an empty signal mask: a child started from a Swift concurrency thread
        // inherits its blocked signals, and perf would never see the SIGINT that stops it.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGINT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var spawned: pid_t = 0
        guard posix_spawnp(&spawned, "perf", nil, &attributes, argv, environ) == 0 else { return }
        child = spawned
        // perf needs a moment to attach before the phase starts.
        Thread.sleep(forTimeInterval: 0.5)
    }

    /// Stops recording (SIGINT, as Ctrl-C) and waits for `perf` to write its file.
    func stop() {
        guard child > 0 else { return }
        kill(child, SIGINT)
        var status: Int32 = 0
        waitpid(child, &status, 0)
        child = 0
    }
}
