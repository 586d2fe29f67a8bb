import DepotProtocol
import Synchronization

/// A log-linear histogram of durations: exact below 64 ns, then 32 buckets per
/// power of two, so every percentile it reports is within 1/32 (about 3%) of
/// the true value, in constant memory (1,920 counters) and constant time per sample.
///
/// The same idea as HdrHistogram with two significant binary digits more than
/// needed, written here so that `depotd` takes no dependency for it.
struct LatencyHistogram: Sendable {
    /// Sub-buckets per power of two (as a power of two).
    static let subBucketBits = 5
    static let subBuckets = 1 << subBucketBits
    /// Values below this are counted exactly.
    static let linearLimit = 2 * subBuckets
    static let bucketCount = linearLimit + (64 - subBucketBits - 1) * subBuckets

    private var counts = [Int64](repeating: 0, count: bucketCount)
    /// How many samples.
    private(set) var count: Int64 = 0
    /// Their sum, in nanoseconds.
    private(set) var sumNanoseconds: Double = 0
    /// The largest, in nanoseconds.
    private(set) var maxNanoseconds: UInt64 = 0

    /// The bucket of `value` (nanoseconds).
    static func bucket(of value: UInt64) -> Int {
        if value < UInt64(linearLimit) { return Int(value) }
        let exponent = 63 - value.leadingZeroBitCount
        let shift = exponent - subBucketBits
        let sub = Int(value >> UInt64(shift)) - subBuckets
        return linearLimit + (exponent - subBucketBits - 1) * subBuckets + sub
    }

    /// The largest value (nanoseconds) that falls in `bucket`.
    static func upperBound(of bucket: Int) -> UInt64 {
        if bucket < linearLimit { return UInt64(bucket) }
        let offset = bucket - linearLimit
        let exponent = offset / subBuckets + subBucketBits + 1
        let shift = exponent - subBucketBits
        let lower = UInt64(subBuckets + offset % subBuckets) << UInt64(shift)
        return lower + ((UInt64(1) << UInt64(shift)) - 1)
    }

    /// Adds one sample.
    mutating func record(nanoseconds value: UInt64) {
        counts[Self.bucket(of: value)] += 1
        count += 1
        sumNanoseconds += Double(value)
        maxNanoseconds = max(maxNanoseconds, value)
    }

    /// Adds one sample.
    mutating func record(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = max(0, seconds) * 1_000_000_000 + max(0, attoseconds) / 1_000_000_000
        record(nanoseconds: UInt64(nanoseconds))
    }

    /// The value (nanoseconds) at or below which `quantile` (0...1) of the samples fall; 0 when empty.
    func value(atQuantile quantile: Double) -> UInt64 {
        guard count > 0 else { return 0 }
        let rank = max(1, Int64((quantile * Double(count)).rounded(.up)))
        var seen: Int64 = 0
        for (bucket, bucketCount) in counts.enumerated() where bucketCount > 0 {
            seen += bucketCount
            if seen >= rank { return min(Self.upperBound(of: bucket), maxNanoseconds) }
        }
        return maxNanoseconds
    }

    /// The wire's summary, in milliseconds.
    var percentiles: ServerStats.Percentiles {
        func ms(_ nanoseconds: UInt64) -> Double { Double(nanoseconds) / 1_000_000 }
        return ServerStats.Percentiles(
            count: count, meanMs: count == 0 ? 0 : sumNanoseconds / Double(count) / 1_000_000,
            p50Ms: ms(value(atQuantile: 0.5)), p90Ms: ms(value(atQuantile: 0.9)), p99Ms: ms(value(atQuantile: 0.99)),
            maxMs: ms(maxNanoseconds))
    }
}
