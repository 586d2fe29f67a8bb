/// A token of the predicate format language.
struct PredicateToken: Equatable {
    enum Kind: Equatable {
        case identifier(String)
        case string(String)
        case number(JSONValue)
        case variable(String)
        case formatArgument(Character)
        case symbol(String)
        case end
    }

    var kind: Kind
    /// Offset in the predicate text, in Unicode scalars.
    var position: Int
}

/// Splits a predicate string into tokens, tracking offsets for errors.
///
/// Reads the text scalar by scalar (each ``characters`` element is one scalar):
/// a quoted text keeps its bytes, and a quote followed by a combining mark
/// (`'\u{301}x'`) still opens the literal, as Swift's `Character` (a grapheme
/// cluster, compared by canonical equivalence) would not let it (DESIGN.md §4).
struct PredicateLexer {
    let characters: [Character]
    private var index = 0
    let text: String

    init(_ text: String) {
        self.text = text
        characters = text.unicodeScalars.map(Character.init)
    }

    func syntaxError(_ position: Int, expected: String, found: String? = nil) -> RPCError {
        let start = max(0, position - 20)
        let end = min(characters.count, position + 20)
        let excerpt = String(characters[start..<end])
        let pointer = String(repeating: " ", count: position - start) + "^"
        let what = found.map { ", found \($0)" } ?? ""
        return RPCError(
            code: .predicateSyntax,
            message:
                "predicate syntax error at character \(position): expected \(expected)\(what)\n  \(excerpt)\n  \(pointer)",
            data: ["position": .int(Int64(position)), "expected": .string(expected)])
    }

    mutating func tokens() throws(RPCError) -> [PredicateToken] {
        var result: [PredicateToken] = []
        while true {
            let token = try next()
            result.append(token)
            if token.kind == .end { return result }
            if result.count > 100_000 {
                throw syntaxError(token.position, expected: "a shorter predicate (at most 100000 tokens)")
            }
        }
    }

    private mutating func next() throws(RPCError) -> PredicateToken {
        while index < characters.count, characters[index].isWhitespace { index += 1 }
        let start = index
        guard index < characters.count else { return PredicateToken(kind: .end, position: start) }
        let character = characters[index]
        if character.isLetter || character == "_" || character == "#" {
            if character == "#" { index += 1 }
            while index < characters.count, characters[index].continuesName { index += 1 }
            return PredicateToken(
                kind: .identifier(String(characters[(character == "#" ? start + 1 : start)..<index])), position: start)
        }
        if character == "\"" || character == "'" {
            return PredicateToken(kind: .string(try quoted(character)), position: start)
        }
        if character.isNumber
            || (character == "-" && index + 1 < characters.count
                && (characters[index + 1].isNumber || characters[index + 1] == "."))
            || (character == "." && index + 1 < characters.count && characters[index + 1].isNumber)
        {
            return PredicateToken(kind: .number(try number()), position: start)
        }
        if character == "$" {
            index += 1
            let nameStart = index
            while index < characters.count, characters[index].continuesName { index += 1 }
            guard index > nameStart else { throw syntaxError(start, expected: "a variable name after $") }
            return PredicateToken(kind: .variable(String(characters[nameStart..<index])), position: start)
        }
        if character == "%" {
            index += 1
            guard index < characters.count, ["@", "K", "d", "f", "i", "u", "l", "s"].contains(characters[index]) else {
                throw syntaxError(start, expected: "a format specifier: %@, %K, %d or %f")
            }
            var specifier = characters[index]
            index += 1
            if specifier == "l" || specifier == "u" {  // %ld, %lu, %lld, %lf
                while index < characters.count, ["l", "d", "u", "f"].contains(characters[index]) {
                    specifier = characters[index]; index += 1
                }
            }
            return PredicateToken(kind: .formatArgument(specifier), position: start)
        }
        let next: Character? = index + 1 < characters.count ? characters[index + 1] : nil
        var symbol: String?
        switch (character, next) {
        case ("=", "="), ("!", "="), ("<", ">"), ("<", "="), ("=", "<"), (">", "="), ("=", ">"), ("&", "&"), ("|", "|"):
            symbol = String([character, next!])
        case ("=", _), ("<", _), (">", _), ("!", _), ("(", _), (")", _), ("{", _), ("}", _), (",", _), (".", _),
            ("@", _), ("[", _), ("]", _):
            symbol = String(character)
        default:
            symbol = nil
        }
        if let symbol {
            index += symbol.count
            return PredicateToken(kind: .symbol(symbol), position: start)
        }
        throw syntaxError(start, expected: "a key, a value or an operator", found: "'\(character)'")
    }

    private mutating func quoted(_ quote: Character) throws(RPCError) -> String {
        let start = index
        index += 1
        var value = ""
        while index < characters.count {
            let character = characters[index]
            index += 1
            if character == quote { return value }
            if character == "\\" {
                guard index < characters.count else { break }
                let escaped = characters[index]
                index += 1
                switch escaped {
                case "n": value.append("\n")
                case "t": value.append("\t")
                case "r": value.append("\r")
                case "0": value.append("\0")
                default: value.append(escaped)
                }
            } else {
                value.append(character)
            }
        }
        throw syntaxError(start, expected: "a closing \(quote)")
    }

    private mutating func number() throws(RPCError) -> JSONValue {
        let start = index
        if characters[index] == "-" { index += 1 }
        var isInteger = true
        if index + 1 < characters.count, characters[index] == "0",
            characters[index + 1] == "x" || characters[index + 1] == "X"
        {
            index += 2
            let digits = index
            while index < characters.count, characters[index].isHexDigit { index += 1 }
            guard let value = Int64(String(characters[digits..<index]), radix: 16) else {
                throw syntaxError(start, expected: "a hexadecimal number")
            }
            return .int(characters[start] == "-" ? -value : value)
        }
        while index < characters.count, characters[index].isNumber { index += 1 }
        if index < characters.count, characters[index] == "." {
            isInteger = false
            index += 1
            while index < characters.count, characters[index].isNumber { index += 1 }
        }
        if index < characters.count, characters[index] == "e" || characters[index] == "E" {
            isInteger = false
            index += 1
            if index < characters.count, characters[index] == "+" || characters[index] == "-" { index += 1 }
            while index < characters.count, characters[index].isNumber { index += 1 }
        }
        let text = String(characters[start..<index])
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else {
            throw syntaxError(start, expected: "a number", found: text)
        }
        return .double(value)
    }
}

extension Character {
    /// Whether this (one-scalar) character can continue a key or variable name: a letter,
    /// a digit, `_`, or a combining mark (a decomposed accent of the letter before it).
    fileprivate var continuesName: Bool {
        if isLetter || isNumber || self == "_" { return true }
        switch unicodeScalars.first?.properties.generalCategory {
        case .nonspacingMark?, .spacingMark?, .enclosingMark?: return true
        default: return false
        }
    }
}
