/// Serializes ``JSONValue`` to compact UTF-8 JSON.
///
/// Object members are written in sorted key order so that equal values give
/// equal bytes (cache keys, tests, diffs).
public struct JSONWriter {
    /// The bytes written so far.
    public private(set) var bytes: [UInt8] = []

    /// Creates an empty writer, reserving `capacity` bytes.
    public init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    /// Serializes one value.
    public static func encode(_ value: JSONValue) -> [UInt8] {
        var writer = JSONWriter()
        writer.write(value)
        return writer.bytes
    }

    /// Serializes one value with two-space indentation, for people.
    public static func encodePretty(_ value: JSONValue) -> String {
        var writer = JSONWriter()
        writer.writePretty(value, indent: 0)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    private mutating func newline(_ indent: Int) {
        bytes.append(0x0A)
        bytes.append(contentsOf: repeatElement(UInt8(ascii: " "), count: indent * 2))
    }

    private mutating func writePretty(_ value: JSONValue, indent: Int) {
        switch value {
        case .array(let elements) where !elements.isEmpty:
            bytes.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { bytes.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                writePretty(element, indent: indent + 1)
            }
            newline(indent)
            bytes.append(UInt8(ascii: "]"))
        case .object(let members) where !members.isEmpty:
            bytes.append(UInt8(ascii: "{"))
            for (offset, key) in members.keys.sortedByBytes().enumerated() {
                if offset > 0 { bytes.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                write(key)
                writeRaw(": ")
                writePretty(members[key]!, indent: indent + 1)
            }
            newline(indent)
            bytes.append(UInt8(ascii: "}"))
        default:
            write(value)
        }
    }

    /// Appends raw, already-encoded JSON.
    public mutating func writeRaw(_ json: some Sequence<UInt8>) { bytes.append(contentsOf: json) }

    /// Appends raw ASCII text such as punctuation or a member name.
    public mutating func writeRaw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Appends `value`.
    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: writeRaw("null")
        case .bool(let flag): flag ? writeRaw("true") : writeRaw("false")
        case .int(let number): write(number)
        case .double(let number): write(number)
        case .string(let text): write(text)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { bytes.append(UInt8(ascii: ",")) }
                write(element)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (offset, key) in members.keys.sortedByBytes().enumerated() {
                if offset > 0 { bytes.append(UInt8(ascii: ",")) }
                write(key)
                bytes.append(UInt8(ascii: ":"))
                write(members[key]!)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// Appends an integer.
    public mutating func write(_ number: Int64) {
        // Digits straight into the buffer: a million-row fetch writes millions of integers.
        guard number != .min else { return bytes.append(contentsOf: String(number).utf8) }
        if number < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = number.magnitude
        var reversed: (UInt64, UInt64, UInt64) = (0, 0, 0)  // up to 20 digits, one per byte
        var count = 0
        withUnsafeMutableBytes(of: &reversed) { digits in
            repeat {
                digits[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for index in stride(from: count - 1, through: 0, by: -1) { bytes.append(digits[index]) }
        }
    }

    /// Appends a double; non-finite values, which JSON cannot carry, become `null`.
    public mutating func write(_ number: Double) {
        guard number.isFinite else { return writeRaw("null") }
        if number.rounded() == number && abs(number) < 1e15 {
            bytes.append(contentsOf: String(Int64(number)).utf8)
            bytes.append(contentsOf: ".0".utf8)
        } else {
            bytes.append(contentsOf: String(number).utf8)
        }
    }

    /// Appends an instant as a quoted ISO 8601 UTC string with milliseconds.
    public mutating func appendDate(_ seconds: Double) {
        ISO8601.writeQuoted(seconds, into: &bytes)
    }

    /// Appends a quoted, escaped string.
    public mutating func write(_ text: String) {
        var text = text
        text.withUTF8 { writeQuoted(utf8: $0) }
    }

    /// Appends UTF-8 text (a column SQLite handed over, say) quoted and escaped,
    /// copying runs that need no escape in one go.
    public mutating func writeQuoted(utf8 text: UnsafeBufferPointer<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        var start = 0
        var index = 0
        while index < text.count {
            let byte = text[index]
            index += 1
            guard byte < 0x20 || byte == 0x22 || byte == 0x5C else { continue }
            if start < index - 1 { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: text[start..<(index - 1)])) }
            start = index
            switch byte {
            case UInt8(ascii: "\""): writeRaw("\\\"")
            case UInt8(ascii: "\\"): writeRaw("\\\\")
            case 0x0A: writeRaw("\\n")
            case 0x0D: writeRaw("\\r")
            case 0x09: writeRaw("\\t")
            default:
                let hex: StaticString = "0123456789abcdef"
                bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30])
                bytes.append(hex.utf8Start[Int(byte >> 4)])
                bytes.append(hex.utf8Start[Int(byte & 15)])
            }
        }
        if start < text.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: text[start...])) }
        bytes.append(UInt8(ascii: "\""))
    }
}
