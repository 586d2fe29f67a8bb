import Foundation

/// How long persistent history keeps committed transactions.
public enum HistoryRetention: Sendable, Equatable, CustomStringConvertible {
    /// The newest `n` transactions.
    case count(Int)
    /// Transactions younger than this many seconds.
    case age(Double)
    /// Everything.
    case forever

    /// Parses `10000` (a count), `7d`, `24h`, `30m`, `90s` (an age) or `forever`.
    public init?(parsing text: String) {
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
        case .forever: "every transaction"
        }
    }
}
