import DepotProtocol

/// A read-only view of UTF-8 JSON held in a buffer, read in place: values are
/// found by their byte ranges and built only when asked for.
///
/// The path of streamed fetches (``AsynchronousFetchResult``): the objects of a
/// partial-result chunk are decoded straight from the message's bytes, with no
/// ``JSONValue`` tree per object in between. Steps over a value check its
/// brackets and strings, not every byte; whatever is built from a range
/// (strings, numbers, ``JSONValue``s) is checked as ``JSONParser`` checks it.
struct WireBytes {
    /// The bytes.
    let bytes: UnsafeBufferPointer<UInt8>

    /// One member of an object: the name's bytes (between the quotes) and the value's range.
    struct Member {
        /// The name's bytes, without the quotes.
        var key: Range<Int>
        /// Whether the name holds escapes (then it must be decoded to be compared).
        var keyIsEscaped: Bool
        /// The value's bytes.
        var value: Range<Int>
    }

    /// A failure, with where it was.
    static func failure(_ reason: String, at offset: Int) -> JSONParser.Failure {
        JSONParser.Failure(offset: offset, reason: reason)
    }

    /// The first byte at or after `index` that is not JSON white space.
    func skipWhitespace(from index: Int) -> Int {
        var index = index
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return index
            }
        }
        return index
    }

    /// The range of the value that starts at `start` (white space before it allowed).
    func valueRange(from start: Int) throws(JSONParser.Failure) -> Range<Int> {
        let start = skipWhitespace(from: start)
        guard start < bytes.count else { throw Self.failure("unexpected end of input", at: start) }
        var index = start
        switch bytes[start] {
        case UInt8(ascii: "\""):
            index = try stringEnd(from: start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            repeat {
                guard index < bytes.count else { throw Self.failure("unexpected end of input", at: index) }
                switch bytes[index] {
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    guard depth <= JSONParser.maximumDepth else {
                        throw Self.failure("nesting deeper than \(JSONParser.maximumDepth)", at: index)
                    }
                    index += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    index += 1
                case UInt8(ascii: "\""):
                    index = try stringEnd(from: index)
                default:
                    index += 1
                }
            } while depth > 0
        default:
            // A number or a literal: up to the next delimiter; checked when it is read.
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: ","), UInt8(ascii: "]"), UInt8(ascii: "}"), 0x20, 0x09, 0x0A, 0x0D:
                    return start..<index
                default: index += 1
                }
            }
        }
        return start..<index
    }

    /// The index just past the string that opens at `start`.
    private func stringEnd(from start: Int) throws(JSONParser.Failure) -> Int {
        var index = start + 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""): return index + 1
            case UInt8(ascii: "\\"): index += 2
            default: index += 1
            }
        }
        throw Self.failure("unterminated string", at: start)
    }

    /// The members of the object at `range`, in order (a repeated name appears each time).
    func members(of range: Range<Int>, into members: inout [Member]) throws(JSONParser.Failure) {
        let end = try object(at: range.lowerBound, limit: range.upperBound, into: &members)
        guard end == range.upperBound else { throw Self.failure("expected ',' or '}'", at: end - 1) }
    }

    /// The members of the object that opens at `start` (within `limit`), in order, and the
    /// index just past its `}`: an array's element is found and read in one pass.
    func object(at start: Int, limit: Int, into members: inout [Member]) throws(JSONParser.Failure) -> Int {
        members.removeAll(keepingCapacity: true)
        guard start < limit, bytes[start] == UInt8(ascii: "{") else {
            throw Self.failure("expected an object", at: start)
        }
        var index = skipWhitespace(from: start + 1)
        if index < limit, bytes[index] == UInt8(ascii: "}") { return index + 1 }
        while true {
            index = skipWhitespace(from: index)
            guard index < limit, bytes[index] == UInt8(ascii: "\"") else {
                throw Self.failure("expected a member name", at: index)
            }
            let keyEnd = try stringEnd(from: index)
            let key = (index + 1)..<(keyEnd - 1)
            let escaped = bytes[key].contains(UInt8(ascii: "\\"))
            index = skipWhitespace(from: keyEnd)
            guard index < limit, bytes[index] == UInt8(ascii: ":") else {
                throw Self.failure("expected ':'", at: index)
            }
            let value = try valueRange(from: index + 1)
            guard value.upperBound <= limit else { throw Self.failure("unexpected end of input", at: limit) }
            members.append(Member(key: key, keyIsEscaped: escaped, value: value))
            index = skipWhitespace(from: value.upperBound)
            guard index < limit else { throw Self.failure("unexpected end of input", at: index) }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): return index + 1
            default: throw Self.failure("expected ',' or '}'", at: index)
            }
        }
    }

    /// The elements of the array at `range`, in order.
    func elements(of range: Range<Int>) throws(JSONParser.Failure) -> [Range<Int>] {
        guard range.lowerBound < range.upperBound, bytes[range.lowerBound] == UInt8(ascii: "[") else {
            throw Self.failure("expected an array", at: range.lowerBound)
        }
        var elements: [Range<Int>] = []
        var index = skipWhitespace(from: range.lowerBound + 1)
        if index < range.upperBound, bytes[index] == UInt8(ascii: "]") { return elements }
        while true {
            let element = try valueRange(from: index)
            elements.append(element)
            index = skipWhitespace(from: element.upperBound)
            guard index < range.upperBound else { throw Self.failure("unexpected end of input", at: index) }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]") where index + 1 == range.upperBound: return elements
            default: throw Self.failure("expected ',' or ']'", at: index)
            }
        }
    }

    /// The member name `member` holds, decoded.
    func key(of member: Member) throws(JSONParser.Failure) -> String {
        if !member.keyIsEscaped, let text = JSONParser.string(utf8: UnsafeBufferPointer(rebasing: bytes[member.key])) {
            return text
        }
        return try string(at: (member.key.lowerBound - 1)..<(member.key.upperBound + 1))
    }

    /// Whether `member`'s name is `name`.
    func member(_ member: Member, isNamed name: String) -> Bool {
        guard !member.keyIsEscaped else { return (try? key(of: member)) == name }
        let length = member.key.count
        guard name.utf8.count == length else { return false }
        let start = member.key.lowerBound
        let same = name.utf8.withContiguousStorageIfAvailable { utf8 in
            for offset in 0..<length where utf8[offset] != bytes[start + offset] { return false }
            return true
        }
        if let same { return same }
        return bytes[member.key].elementsEqual(name.utf8)
    }

    /// The string at `range` (quotes included).
    func string(at range: Range<Int>) throws(JSONParser.Failure) -> String {
        guard range.count >= 2, bytes[range.lowerBound] == UInt8(ascii: "\"") else {
            throw Self.failure("expected a string", at: range.lowerBound)
        }
        let inner = UnsafeBufferPointer(rebasing: bytes[(range.lowerBound + 1)..<(range.upperBound - 1)])
        // No escape and no control character: the bytes are the string.
        if !inner.contains(where: { $0 == UInt8(ascii: "\\") || $0 < 0x20 }) {
            guard let text = JSONParser.string(utf8: inner) else {
                throw Self.failure("invalid UTF-8 in string", at: range.lowerBound + 1)
            }
            return text
        }
        guard case .string(let text) = try value(at: range) else {
            throw Self.failure("expected a string", at: range.lowerBound)
        }
        return text
    }

    /// The value at `range`, built (as ``JSONParser`` builds it).
    func value(at range: Range<Int>) throws(JSONParser.Failure) -> JSONValue {
        do {
            return try JSONParser.parse(UnsafeBufferPointer(rebasing: bytes[range]))
        } catch {
            throw Self.failure(error.reason, at: range.lowerBound + error.offset)
        }
    }

    /// Whether the value at `range` is `null`.
    func isNull(_ range: Range<Int>) -> Bool {
        range.count == 4 && bytes[range.lowerBound] == UInt8(ascii: "n")
            && bytes[range].elementsEqual("null".utf8)
    }

    /// What kind of JSON value starts `range`, for error messages.
    func kindName(_ range: Range<Int>) -> String {
        guard range.lowerBound < range.upperBound else { return "nothing" }
        switch bytes[range.lowerBound] {
        case UInt8(ascii: "{"): return "a dictionary"
        case UInt8(ascii: "["): return "an array"
        case UInt8(ascii: "\""): return "a string"
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return "bool"
        case UInt8(ascii: "n"): return "null"
        default: return "number"
        }
    }
}
