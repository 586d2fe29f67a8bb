import Foundation

/// `perf record -g` attached to a process for one phase of a suite, when the environment variable
/// `DEPOT_BENCH_PERF` names a directory: the profile goes to `DIR/<label>.data` (read it with
/// `perf report -i`). Without the variable, or without `perf`, it records nothing.
final class PerfRecorder {
    private let process: Process?

    /// Starts recording `pid` as `label`, if asked to.
    init(pid: Int32, label: String) {
        guard let directory = ProcessInfo.processInfo.environment["DEPOT_BENCH_PERF"], !directory.isEmpty else {
            process = nil
            return
        }
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let perf = Process()
        perf.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        perf.arguments = ["perf", "record", "-g", "-p", "\(pid)", "-o", "\(directory)/\(label).data"]
        perf.standardOutput = FileHandle.nullDevice
        perf.standardError = FileHandle.nullDevice
        do {
            try perf.run()
            // perf needs a moment to attach before the phase starts.
            Thread.sleep(forTimeInterval: 0.5)
            process = perf
        } catch {
            process = nil
        }
    }

    /// Stops recording (SIGINT, as Ctrl-C) and waits for `perf` to write its file.
    func stop() {
        guard let process, process.isRunning else { return }
        process.interrupt()
        process.waitUntilExit()
    }
}
