/// Reads a JSON text a member or an element at a time, building only what it
/// is asked for: how the daemon takes a million-object `store/batchInsert`
/// without holding a million parsed objects.
///
/// ```swift
/// try JSONStreamReader.read(bytes) { reader throws(JSONParser.Failure) in
///     try reader.beginObject()
///     while let key = try reader.nextKey() {
///         if key == "objects" {
///             try reader.beginArray()
///             while try reader.nextElement() { handle(try reader.value()) }
///         } else {
///             _ = try reader.skipValue()
///         }
///     }
/// }
/// ```
///
/// Skipping checks structure (brackets, strings, literals) but does not build
/// or fully validate what it skips; read it again with ``value()`` to get it.
public struct JSONStreamReader {
    private var parser: JSONParser
    /// Per open object or array: whether a member or element was read (a comma comes next).
    private var started: [Bool] = []

    private init(parser: JSONParser) { self.parser = parser }

    /// Calls `body` with a reader over `bytes[range]` (the whole of `bytes` by default).
    public static func read<T>(
        _ bytes: [UInt8], range: Range<Int>? = nil, _ body: (inout JSONStreamReader) throws -> T
    ) rethrows -> T {
        let range = range ?? 0..<bytes.count
        return try bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONStreamReader(parser: JSONParser(bytes: UnsafeBufferPointer(rebasing: buffer[range])))
            return try body(&reader)
        }
    }

    /// The byte offset reached, relative to the range read.
    public var offset: Int { parser.index }

    /// Expects `{` and enters the object.
    public mutating func beginObject() throws(JSONParser.Failure) {
        try open(UInt8(ascii: "{"), "an object")
    }

    /// Expects `[` and enters the array.
    public mutating func beginArray() throws(JSONParser.Failure) {
        try open(UInt8(ascii: "["), "an array")
    }

    private mutating func open(_ byte: UInt8, _ what: String) throws(JSONParser.Failure) {
        parser.skipWhitespace()
        guard parser.index < parser.bytes.count, parser.bytes[parser.index] == byte else {
            throw parser.fail("expected \(what)")
        }
        parser.index += 1
        started.append(false)
    }

    /// The next member's name, positioned at its value; `nil` at the object's end (which is consumed).
    public mutating func nextKey() throws(JSONParser.Failure) -> String? {
        guard try advance(closing: UInt8(ascii: "}")) else { return nil }
        guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "\"") else {
            throw parser.fail("expected a member name")
        }
        let key = try parser.parseString()
        parser.skipWhitespace()
        guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: ":") else {
            throw parser.fail("expected ':'")
        }
        parser.index += 1
        return key
    }

    /// Whether another element follows, positioned at it; `false` at the array's end (which is consumed).
    public mutating func nextElement() throws(JSONParser.Failure) -> Bool {
        try advance(closing: UInt8(ascii: "]"))
    }

    private mutating func advance(closing: UInt8) throws(JSONParser.Failure) -> Bool {
        guard let wasStarted = started.last else { throw parser.fail("not inside an object or array") }
        parser.skipWhitespace()
        guard parser.index < parser.bytes.count else { throw parser.fail("unexpected end of input") }
        if parser.bytes[parser.index] == closing {
            parser.index += 1
            started.removeLast()
            return false
        }
        if wasStarted {
            guard parser.bytes[parser.index] == UInt8(ascii: ",") else {
                throw parser.fail("expected ',' or '\(Character(Unicode.Scalar(closing)))'")
            }
            parser.index += 1
            parser.skipWhitespace()
        }
        started[started.count - 1] = true
        return true
    }

    /// Parses the value at the current position.
    public mutating func value() throws(JSONParser.Failure) -> JSONValue {
        parser.skipWhitespace()
        return try parser.parseValue()
    }

    /// Steps over the value at the current position without building it; returns
    /// its byte range (relative to the range read) and, for an array, its element count.
    public mutating func skipValue() throws(JSONParser.Failure) -> (range: Range<Int>, elements: Int?) {
        parser.skipWhitespace()
        let start = parser.index
        guard start < parser.bytes.count else { throw parser.fail("unexpected end of input") }
        let first = parser.bytes[start]
        guard first == UInt8(ascii: "[") || first == UInt8(ascii: "{") || first == UInt8(ascii: "\"") else {
            // A number or a literal: short, so parsed.
            _ = try parser.parseValue()
            return (start..<parser.index, nil)
        }
        let isArray = first == UInt8(ascii: "[")
        var elements = 0
        var depth = 0
        var sawValue = false
        repeat {
            guard parser.index < parser.bytes.count else { throw parser.fail("unexpected end of input") }
            let byte = parser.bytes[parser.index]
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                if depth == 1 && isArray && !sawValue {
                    elements += 1
                    sawValue = true
                }
                depth += 1
                guard depth <= JSONParser.maximumDepth else {
                    throw parser.fail("nesting deeper than \(JSONParser.maximumDepth)")
                }
                parser.index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                parser.index += 1
            case UInt8(ascii: "\""):
                if depth == 1 && isArray && !sawValue {
                    elements += 1
                    sawValue = true
                }
                try skipString()
            case UInt8(ascii: ","):
                if depth == 1 { sawValue = false }
                parser.index += 1
            case 0x20, 0x09, 0x0A, 0x0D, UInt8(ascii: ":"):
                parser.index += 1
            default:
                if depth == 1 && isArray && !sawValue {
                    elements += 1
                    sawValue = true
                }
                parser.index += 1
            }
        } while depth > 0
        return (start..<parser.index, isArray ? elements : nil)
    }

    /// Steps over a string (its escapes too) without decoding it.
    private mutating func skipString() throws(JSONParser.Failure) {
        parser.index += 1
        while parser.index < parser.bytes.count {
            switch parser.bytes[parser.index] {
            case UInt8(ascii: "\""):
                parser.index += 1
                return
            case UInt8(ascii: "\\"): parser.index += 2
            default: parser.index += 1
            }
        }
        throw parser.fail("unterminated string")
    }

    /// Expects nothing but white space to the end.
    public mutating func end() throws(JSONParser.Failure) {
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count else { throw parser.fail("unexpected trailing characters") }
    }
}
