import DepotProtocol
import Foundation

/// A process's memory from `/proc/PID/status`: resident now and at its peak.
struct ProcessMemory: Sendable {
    /// `VmRSS`: resident set size now, bytes.
    var residentBytes: Int64
    /// `VmHWM`: the peak resident set size so far, bytes.
    var peakResidentBytes: Int64

    /// Reads the figures of `pid` (this process when 0); `nil` if it is gone.
    static func sample(pid: Int32 = 0) -> ProcessMemory? {
        let path = pid == 0 ? "/proc/self/status" : "/proc/\(pid)/status"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        var memory = ProcessMemory(residentBytes: 0, peakResidentBytes: 0)
        for line in text.split(separator: "\n") {
            if line.hasPrefix("VmRSS:") {
                memory.residentBytes = kilobytes(line) * 1024
            } else if line.hasPrefix("VmHWM:") {
                memory.peakResidentBytes = kilobytes(line) * 1024
            }
        }
        return memory
    }

    private static func kilobytes(_ line: Substring) -> Int64 {
        Int64(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
    }

    /// The figures in MiB, for notes.
    var json: JSONValue {
        [
            "rssMiB": .double(Double(residentBytes) / 1_048_576),
            "peakRssMiB": .double(Double(peakResidentBytes) / 1_048_576),
        ]
    }
}

/// Samples a process's resident memory on a background thread until stopped,
/// keeping the largest value seen (for peak-RSS suites, where `VmHWM` of a
/// long-lived daemon would include earlier phases).
final class MemorySampler: @unchecked Sendable {
    // @unchecked: `peak` and `running` are guarded by `lock`.
    private let pid: Int32
    private let interval: Double
    private let lock = NSLock()
    private var peak: Int64 = 0
    private var running = true
    private let finished = DispatchSemaphore(value: 0)

    /// Starts sampling `pid` every `interval` seconds.
    init(pid: Int32, interval: Double = 0.02) {
        self.pid = pid
        self.interval = interval
        let thread = Thread { [self] in
            while lock.withLock({ running }) {
                if let memory = ProcessMemory.sample(pid: pid) {
                    lock.withLock { peak = max(peak, memory.residentBytes) }
                }
                Thread.sleep(forTimeInterval: interval)
            }
            finished.signal()
        }
        thread.start()
    }

    /// Stops sampling; returns the largest resident size seen, bytes.
    func stop() -> Int64 {
        lock.withLock { running = false }
        finished.wait()
        return lock.withLock { peak }
    }
}
