import Foundation

/// A cgroup v1 `cpu` group with a CFS quota (`cpu.cfs_quota_us` over `cpu.cfs_period_us`): the
/// processes moved into it get at most `cores` CPUs' worth of time, as a machine of that size
/// would give them. Removed (its processes must have exited) by ``remove()``.
struct CPUQuotaGroup {
    /// Where cgroup v1's `cpu` controller is mounted.
    static let root = URL(fileURLWithPath: "/sys/fs/cgroup/cpu")
    /// The CFS period the quota is a share of, microseconds.
    static let period = 100_000

    /// The group's directory.
    let directory: URL
    /// The CPUs' worth of time it allows.
    let cores: Double

    /// Whether groups can be made here (cgroup v1's `cpu` controller mounted and writable).
    static var isAvailable: Bool {
        FileManager.default.isWritableFile(atPath: root.path)
            && FileManager.default.fileExists(atPath: root.appendingPathComponent("cpu.cfs_quota_us").path)
    }

    /// Makes the group `name` allowing `cores` CPUs.
    init(name: String, cores: Double) throws {
        directory = Self.root.appendingPathComponent(name)
        self.cores = cores
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try write("cpu.cfs_period_us", String(Self.period))
        try write("cpu.cfs_quota_us", String(Int(cores * Double(Self.period))))
    }

    /// Moves process `pid`, every thread of it, into the group.
    func add(_ pid: Int32) throws { try write("cgroup.procs", String(pid)) }

    /// How many periods the group was throttled in, and for how long, so far (`cpu.stat`).
    func throttled() -> (periods: Int, seconds: Double) {
        let text = (try? String(contentsOf: directory.appendingPathComponent("cpu.stat"), encoding: .utf8)) ?? ""
        var periods = 0
        var nanoseconds = 0.0
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2 else { continue }
            if parts[0] == "nr_throttled" { periods = Int(parts[1]) ?? 0 }
            if parts[0] == "throttled_time" { nanoseconds = Double(parts[1]) ?? 0 }
        }
        return (periods, nanoseconds / 1e9)
    }

    /// Removes the group (its processes gone): a cgroup directory goes with `rmdir`, files and all.
    func remove() { _ = rmdir(directory.path) }

    private func write(_ file: String, _ value: String) throws {
        try value.write(to: directory.appendingPathComponent(file), atomically: false, encoding: .utf8)
    }
}
