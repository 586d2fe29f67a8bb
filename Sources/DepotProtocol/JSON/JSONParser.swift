/// A strict RFC 8259 parser from UTF-8 bytes to ``JSONValue``.
///
/// Hand-written because every inbound message goes through it: it parses in
/// one pass without Foundation, reports the byte offset of the first error,
/// and bounds nesting depth so hostile input cannot exhaust the stack.
public struct JSONParser {
    /// Why parsing failed, and where.
    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible {
        /// The byte offset of the problem.
        public let offset: Int
        /// What was wrong there.
        public let reason: String
        public var description: String { "\(reason) at byte \(offset)" }

        /// A failure for `reason` at byte `offset`.
        public init(offset: Int, reason: String) {
            self.offset = offset
            self.reason = reason
        }
    }

    /// The deepest nesting of arrays and objects accepted.
    public static let maximumDepth = 512

    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    private var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Parses one JSON text (surrounding white space allowed, nothing else).
    public static func parse(_ bytes: some Collection<UInt8>) throws(Failure) -> JSONValue {
        let result: Result<JSONValue, Failure>? = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = JSONParser(bytes: buffer)
            return Result { () throws(Failure) in try parser.parseDocument() }
        }
        if let result { return try result.get() }
        return try parse(Array(bytes))
    }

    /// Parses a JSON text held in a string.
    public static func parse(_ text: String) throws(Failure) -> JSONValue {
        try parse(Array(text.utf8))
    }

    private mutating func parseDocument() throws(Failure) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw fail("unexpected trailing characters") }
        return value
    }

    func fail(_ reason: String) -> Failure { Failure(offset: index, reason: reason) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(Failure) -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(Failure) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw fail("unexpected end of input") }
        let pointer = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != pointer[offset] {
            throw fail("invalid literal")
        }
        index += count
    }

    private mutating func enter() throws(Failure) {
        depth += 1
        if depth > Self.maximumDepth { throw fail("nesting deeper than \(Self.maximumDepth)") }
    }

    private mutating func parseObject() throws(Failure) -> JSONValue {
        try enter()
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue()
            // A `[String: _]` takes a canonically equivalent name as the same member (keeping the
            // first name's bytes): refuse it rather than merge two members (DESIGN.md §4).
            if members.updateValue(value, forKey: key) != nil, let kept = members.index(forKey: key),
                !members[kept].key.bytesEqual(key)
            {
                throw fail(
                    "two member names that differ only in Unicode normalization (\(ByteString(members[kept].key).escaped) and \(ByteString(key).escaped)): Depot compares text by bytes, so these would be two members; rename one"
                )
            }
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                depth -= 1
                return .object(members)
            } else {
                throw fail("expected ',' or '}'")
            }
        }
    }

    private mutating func parseArray() throws(Failure) -> JSONValue {
        try enter()
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                depth -= 1
                return .array(elements)
            } else {
                throw fail("expected ',' or ']'")
            }
        }
    }

    mutating func parseString() throws(Failure) -> String {
        index += 1
        let start = index
        // Fast path: no escapes, so the bytes are the string.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                index += 1
                return try validatedString(slice, at: start)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw fail("control character in string") }
            index += 1
        }
        var scratch = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return try scratch.withUnsafeBufferPointer { buffer throws(Failure) in
                    try validatedString(buffer, at: start)
                }
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("unexpected end of input") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scratch.append(0x22)
                case UInt8(ascii: "\\"): scratch.append(0x5C)
                case UInt8(ascii: "/"): scratch.append(0x2F)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"): try appendUnicodeEscape(to: &scratch)
                default: throw fail("invalid escape")
                }
            default:
                if byte < 0x20 { throw fail("control character in string") }
                scratch.append(byte)
                index += 1
            }
        }
        throw fail("unterminated string")
    }

    private func validatedString(_ buffer: UnsafeBufferPointer<UInt8>, at offset: Int) throws(Failure) -> String {
        guard let string = Self.string(utf8: buffer) else {
            throw Failure(offset: offset, reason: "invalid UTF-8 in string")
        }
        return string
    }

    /// The text `utf8` holds, or `nil` when it is not valid UTF-8. ASCII (most names and
    /// values) skips `String(validating:)`, whose generic metadata lookup cost more than
    /// the rest of parsing a short string.
    public static func string(utf8: UnsafeBufferPointer<UInt8>) -> String? {
        var index = 0
        while index < utf8.count, utf8[index] < 0x80 { index += 1 }
        if index == utf8.count { return String(decoding: utf8, as: UTF8.self) }
        return String(validating: utf8, as: UTF8.self)
    }

    private mutating func hex4() throws(Failure) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("unexpected end of input") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private mutating func appendUnicodeEscape(to scratch: inout [UInt8]) throws(Failure) {
        var scalar = try hex4()
        if (0xD800...0xDBFF).contains(scalar) {
            guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw fail("unpaired surrogate") }
            index += 2
            let low = try hex4()
            guard (0xDC00...0xDFFF).contains(low) else { throw fail("unpaired surrogate") }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        } else if (0xDC00...0xDFFF).contains(scalar) {
            throw fail("unpaired surrogate")
        }
        guard let unicode = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
        scratch.append(contentsOf: String(Character(unicode)).utf8)
    }

    private mutating func parseNumber() throws(Failure) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
            throw fail("invalid number")
        }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digits = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digits else { throw fail("invalid number") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            let digits = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            guard index > digits else { throw fail("invalid number") }
        }
        // Up to 18 digits cannot overflow: add them up without building a String.
        if isInteger && index - start <= 18 {
            let negative = bytes[start] == UInt8(ascii: "-")
            var value: Int64 = 0
            for byte in bytes[(negative ? start + 1 : start)..<index] { value = value * 10 + Int64(byte &- 0x30) }
            return .int(negative ? -value : value)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text) else { throw Failure(offset: start, reason: "invalid number") }
        // JSON has no infinities: a literal too large for a double is refused, not turned into one.
        guard value.isFinite else { throw Failure(offset: start, reason: "number out of range") }
        return .double(value)
    }
}
