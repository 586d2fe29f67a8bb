/// ISO 8601 UTC timestamps with milliseconds, written and read without Foundation formatters (they are slow and not `Sendable`).
public enum ISO8601 {
    /// Seconds since 1970 for `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`, or a date alone (`YYYY-MM-DD`, midnight UTC).
    ///
    /// Dates have millisecond precision: digits past the third of the fraction
    /// are dropped. The result is the double nearest to a whole number of
    /// milliseconds, computed in integers, so ``string(from:)`` gives back the
    /// millisecond text exactly (summing `digit × 0.1ⁿ` in floating point made
    /// `.638` read back as `.637`).
    public static func seconds(from text: String) -> Double? {
        milliseconds(from: text).map { Double($0) / 1000 }
    }

    /// Whole milliseconds since 1970 for the forms ``seconds(from:)`` reads.
    public static func milliseconds(from text: String) -> Int64? {
        // A native string's UTF-8 is read in place: no copy per date (a million-row batch reads a million).
        var text = text
        return text.withUTF8 { milliseconds(utf8: $0) }
    }

    private static func milliseconds(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<start + count] {
                guard (48...57).contains(byte) else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard let year = number(0, 4), bytes.count >= 10, bytes[4] == 45, let month = number(5, 2), bytes[7] == 45,
            let day = number(8, 2), (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var seconds = Int64(daysFromCivil(year: year, month: month, day: day)) * 86_400
        if bytes.count == 10 { return seconds * 1000 }
        guard bytes.count >= 19, bytes[10] == 84 || bytes[10] == 116 || bytes[10] == 32, let hour = number(11, 2),
            bytes[13] == 58, let minute = number(14, 2), bytes[16] == 58, let second = number(17, 2),
            hour < 24, minute < 60, second < 61
        else { return nil }
        seconds += Int64(hour * 3600 + minute * 60 + second)
        var fraction: Int64 = 0
        var index = 19
        if index < bytes.count, bytes[index] == 46 {
            index += 1
            let start = index
            while index < bytes.count, (48...57).contains(bytes[index]) {
                if index - start < 3 { fraction = fraction * 10 + Int64(bytes[index] - 48) }
                index += 1
            }
            guard index > start else { return nil }
            for _ in min(index - start, 3)..<3 { fraction *= 10 }
        }
        guard index < bytes.count else { return nil }
        if bytes[index] == 90 || bytes[index] == 122 {
            return index + 1 == bytes.count ? seconds * 1000 + fraction : nil
        }
        guard bytes[index] == 43 || bytes[index] == 45, let offsetHour = number(index + 1, 2) else { return nil }
        var offsetMinute = 0
        if index + 3 < bytes.count {
            let colon = bytes[index + 3] == 58 ? 1 : 0
            guard let minutes = number(index + 3 + colon, 2), index + 5 + colon == bytes.count else { return nil }
            offsetMinute = minutes
        } else if index + 3 != bytes.count {
            return nil
        }
        let offset = Int64(offsetHour * 3600 + offsetMinute * 60)
        return (bytes[index] == 43 ? seconds - offset : seconds + offset) * 1000 + fraction
    }

    /// The whole milliseconds a stored number of seconds stands for: the
    /// nearest, so that a value that went in as `k / 1000` comes out as `k`.
    static func wholeMilliseconds(_ seconds: Double) -> Int64 {
        let milliseconds = (seconds * 1000).rounded(.toNearestOrAwayFromZero)
        // Only a hand-edited store holds a date this far out; clamp rather than trap.
        guard milliseconds.isFinite else { return 0 }
        return Int64(max(min(milliseconds, 9.2e18), -9.2e18))
    }

    /// `2026-11-22T10:15:30.250Z` for `seconds` since 1970.
    public static func string(from seconds: Double) -> String {
        let milliseconds = wholeMilliseconds(seconds)
        var days = milliseconds / 86_400_000
        var rest = milliseconds % 86_400_000
        if rest < 0 {
            rest += 86_400_000
            days -= 1
        }
        let (year, month, day) = civilFromDays(days)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return
            "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(rest / 3_600_000, 2)):\(pad(rest / 60_000 % 60, 2)):\(pad(rest / 1000 % 60, 2)).\(pad(rest % 1000, 3))Z"
    }

    /// Appends `"2026-11-22T10:15:30.250Z"` (quoted) for `seconds` since 1970, without building a String.
    public static func writeQuoted(_ seconds: Double, into bytes: inout [UInt8]) {
        let milliseconds = wholeMilliseconds(seconds)
        var days = milliseconds / 86_400_000
        var rest = milliseconds % 86_400_000
        if rest < 0 {
            rest += 86_400_000
            days -= 1
        }
        let (year, month, day) = civilFromDays(days)
        func digits(_ value: Int64, _ width: Int) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            var remaining = value
            if remaining < 0 || remaining >= divisor * 10 {
                bytes.append(contentsOf: String(value).utf8)
                return
            }
            while divisor > 0 {
                bytes.append(UInt8(48 + remaining / divisor))
                remaining %= divisor
                divisor /= 10
            }
        }
        bytes.append(34)
        digits(year, 4); bytes.append(45); digits(month, 2); bytes.append(45); digits(day, 2)
        bytes.append(84)
        digits(rest / 3_600_000, 2); bytes.append(58); digits(rest / 60_000 % 60, 2); bytes.append(58);
        digits(rest / 1000 % 60, 2)
        bytes.append(46); digits(rest % 1000, 3)
        bytes.append(90); bytes.append(34)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    public static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The proleptic Gregorian date of a day count since 1970-01-01.
    public static func civilFromDays(_ days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (month <= 2 ? yoe + era * 400 + 1 : yoe + era * 400, month, day)
    }
}
