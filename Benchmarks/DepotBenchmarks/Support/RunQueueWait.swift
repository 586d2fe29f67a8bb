import Foundation

/// How long a process's threads have waited for a CPU while runnable
/// (`/proc/PID/task/*/schedstat`, second field): on a busy machine, the share
/// of a phase's time that no core was free for the daemon.
enum RunQueueWait {
    /// Seconds waited so far by thread name (threads of one name summed); only threads still running.
    static func threads(_ pid: Int32) -> [String: Double] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var byName: [String: Double] = [:]
        for task in tasks {
            let directory = "/proc/\(pid)/task/\(task)"
            guard
                let name = try? String(contentsOfFile: directory + "/comm", encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines),
                let fields = try? String(contentsOfFile: directory + "/schedstat", encoding: .utf8)
                    .split(separator: " "),
                fields.count >= 2, let waited = Double(fields[1])
            else { continue }
            byName[name, default: 0] += waited / 1e9
        }
        return byName
    }
}
