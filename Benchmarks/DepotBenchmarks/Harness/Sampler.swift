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
    /// One iteration.
    var body: (Int) async throws -> Void

    /// Creates a case.
    init(_ name: String, unit: String, body: @escaping (Int) async throws -> Void) {
        self.name = name
        self.unit = unit
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
        var results = cases.map { Measurement(name: $0.name, unit: $0.unit, iterations: 0, seconds: 0, latencies: [], rounds: []) }
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
