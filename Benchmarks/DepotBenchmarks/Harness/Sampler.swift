import Foundation
import Glibc

/// How long to measure: warm-up, timed duration, rounds, and a cap on iterations.
struct SamplingPlan: Sendable {
    /// Untimed time spent on each case before measuring.
    var warmup: Double
    /// Timed seconds per case, split across ``rounds``.
    var duration: Double
    /// How many times the cases take turns (A B A B …), so that load drift on a
    /// shared machine hits the baseline and Depot alike.
    var rounds: Int
    /// Stop a case's round after this many iterations even if time is left.
    var maximumIterations: Int

    /// A full run: 0.5 s warm-up, 3 s per case in 3 rounds.
    static let full = SamplingPlan(warmup: 0.5, duration: 3, rounds: 3, maximumIterations: 5_000_000)
    /// A smoke run: just enough to see that everything works.
    static let quick = SamplingPlan(warmup: 0.05, duration: 0.3, rounds: 1, maximumIterations: 200_000)
}

/// One thing to time: a name, a unit, and the body of one iteration.
///
/// `body` receives the iteration number (counting from 0 across warm-up and
/// rounds) so that each iteration can use fresh values.
struct BenchmarkCase {
    /// The measurement's name.
    var name: String
    /// What one iteration is.
    var unit: String
    /// The daemon serving it, whose CPU time is charged to the case.
    var daemon: Int32?
    /// One iteration.
    var body: (Int) async throws -> Void

    /// Creates a case; `daemon` is the pid of the `depotd` it talks to, if any.
    init(_ name: String, unit: String, daemon: Int32? = nil, body: @escaping (Int) async throws -> Void) {
        self.name = name
        self.unit = unit
        self.daemon = daemon
        self.body = body
    }
}

/// Times cases side by side: every case is warmed up, then the cases take
/// turns for ``SamplingPlan/rounds`` rounds, each iteration timed with the
/// monotonic clock.
struct Sampler {
    /// The plan to follow.
    var plan: SamplingPlan

    /// Measures `cases` interleaved; returns one measurement per case, in order.
    func measure(_ cases: [BenchmarkCase]) async throws -> [Measurement] {
        var counters = Array(repeating: 0, count: cases.count)
        var results = cases.map {
            Measurement(
                name: $0.name, unit: $0.unit, iterations: 0, seconds: 0, latencies: [], rounds: [],
                daemonCPUSeconds: $0.daemon.map { _ in 0 })
        }
        for (index, benchmarkCase) in cases.enumerated() {
            let deadline = Self.now() + UInt64(plan.warmup * 1e9)
            repeat {
                try await benchmarkCase.body(counters[index])
                counters[index] += 1
            } while Self.now() < deadline
        }
        let slice = plan.duration / Double(max(plan.rounds, 1))
        let cap = max(1, plan.maximumIterations / max(plan.rounds, 1))
        for _ in 0..<max(plan.rounds, 1) {
            for (index, benchmarkCase) in cases.enumerated() {
                var latencies: [UInt64] = []
                latencies.reserveCapacity(min(cap, 1 << 16))
                let daemonCPU = benchmarkCase.daemon.flatMap(CPUTime.process)
                let selfCPU = CPUTime.current()
                let start = Self.now()
                let deadline = start + UInt64(slice * 1e9)
                var last = start
                repeat {
                    try await benchmarkCase.body(counters[index])
                    counters[index] += 1
                    let now = Self.now()
                    latencies.append(now - last)
                    last = now
                } while last < deadline && latencies.count < cap
                let seconds = Double(last - start) / 1e9
                results[index].selfCPUSeconds += CPUTime.current() - selfCPU
                if let daemonCPU, let pid = benchmarkCase.daemon, let now = CPUTime.process(pid) {
                    results[index].daemonCPUSeconds? += now - daemonCPU
                }
                results[index].iterations += latencies.count
                results[index].seconds += seconds
                results[index].rounds.append(Double(latencies.count) / seconds)
                results[index].latencies.append(contentsOf: latencies)
            }
        }
        for index in results.indices { results[index].latencies.sort() }
        return results
    }

    /// The monotonic clock in nanoseconds.
    static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }
}

/// CPU time consumed (user + system) by this process or another.
enum CPUTime {
    /// This process's CPU seconds so far, every thread (`getrusage`, microsecond resolution).
    static func current() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(
            usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// Process `pid`'s CPU seconds so far, every thread including exited ones
    /// (`/proc/PID/stat` utime + stime, clock-tick resolution); `nil` if it is gone.
    static func process(_ pid: Int32) -> Double? { stat("/proc/\(pid)/stat")?.seconds }

    /// Process `pid`'s CPU seconds so far by thread name (threads of one name summed;
    /// `/proc/PID/task/*/stat`); only threads still running.
    static func threads(_ pid: Int32) -> [String: Double] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var byName: [String: Double] = [:]
        for task in tasks {
            guard let (name, seconds) = stat("/proc/\(pid)/task/\(task)/stat") else { continue }
            byName[name, default: 0] += seconds
        }
        return byName
    }

    /// The command name and utime + stime seconds of one `stat` file.
    private static func stat(_ path: String) -> (name: String, seconds: Double)? {
        guard let file = fopen(path, "r") else { return nil }
        defer { fclose(file) }
        var buffer = [CChar](repeating: 0, count: 1024)
        guard fgets(&buffer, Int32(buffer.count), file) != nil else { return nil }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // Fields after the command name, which is in parentheses and may hold spaces.
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is the state (field 3); utime and stime are fields 14 and 15.
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]),
            let open = text.firstIndex(of: "(")
        else { return nil }
        return (String(text[text.index(after: open)..<close]), (user + system) / Double(sysconf(Int32(_SC_CLK_TCK))))
    }
}
