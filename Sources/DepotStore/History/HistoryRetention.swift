import Foundation

/// How long persistent history keeps committed transactions.
public enum HistoryRetention: Sendable, Equatable, CustomStringConvertible {
    /// The newest `n` transactions.
    case count(Int)
    /// Transactions younger than this many seconds.
    case age(Double)
    /// The newest transactions that fit in this many bytes of history.
    case size(Int64)
    /// Every one of these bounds at once (`100000,512MB`).
    case all([HistoryRetention])
    /// Everything.
    case forever

    /// Parses `10000` (a count), `7d`, `24h`, `30m`, `90s` (an age), `512MB`,
    /// `2GB`, `100KB` (a size), `forever`, or several bounds joined by commas
    /// (`100000,512MB`: whichever keeps less).
    public init?(parsing text: String) {
        if text.contains(",") {
            let bounds = text.split(separator: ",").map { HistoryRetention(parsing: String($0)) }
            guard !bounds.isEmpty, !bounds.contains(where: { $0 == nil || $0 == .forever }) else { return nil }
            self = .all(bounds.compactMap { $0 })
            return
        }
        let sizes: [(suffix: String, scale: Double)] = [("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("B", 1)]
        if let (suffix, scale) = sizes.first(where: { text.uppercased().hasSuffix($0.suffix) }) {
            guard let amount = Double(text.dropLast(suffix.count)), amount > 0, amount * scale >= 1 else {
                return nil
            }
            self = .size(Int64(amount * scale))
            return
        }
        if text == "forever" {
            self = .forever
            return
        }
        if let count = Int(text), count > 0 {
            self = .count(count)
            return
        }
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        guard let unit = text.last, let scale = units[unit], let amount = Double(text.dropLast()), amount > 0 else {
            return nil
        }
        self = .age(amount * scale)
    }

    public var description: String {
        switch self {
        case .count(let count): "the newest \(count) transactions"
        case .age(let seconds): "transactions of the last \(Int(seconds)) s"
        case .size(let bytes): "the newest transactions within \(bytes) bytes"
        case .all(let bounds): bounds.map(\.description).joined(separator: " and ")
        case .forever: "every transaction"
        }
    }
}
