import Foundation

/// Operations per second of `body` run `count` times after a short warm-up.
func rate(_ count: Int, _ body: () throws -> Void) throws -> Double {
    for _ in 0..<min(200, count / 10) { try body() }
    let start = ContinuousClock.now
    for _ in 0..<count { try body() }
    return Double(count) / (ContinuousClock.now - start).seconds
}

/// Operations per second of an async `body` run `count` times after a short warm-up.
func asyncRate(_ count: Int, _ body: () async throws -> Void) async throws -> Double {
    for _ in 0..<min(200, count / 10) { try await body() }
    let start = ContinuousClock.now
    for _ in 0..<count { try await body() }
    return Double(count) / (ContinuousClock.now - start).seconds
}

/// The `p`-th percentile (0…1) of `values`.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))]
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
    /// The duration in milliseconds.
    var milliseconds: Double { seconds * 1000 }
}

/// ISO 8601 text for benchmark data.
enum ISO8601Text {
    /// `seconds` since 1970 as ISO 8601 text with fractional seconds.
    static func string(seconds: Double) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: seconds))
    }
}
