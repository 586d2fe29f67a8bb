import DepotProtocol
import Foundation

/// `MATCHES` patterns (ICU syntax, as NSRegularExpression reads them) as
/// PostgreSQL regular expressions (ARE) with the same answer.
///
/// `MATCHES` matches the whole value, and ICU's `$` also matches before one
/// final line terminator; PostgreSQL's `~` is a search. The translation anchors
/// the pattern, spells every literal as a code-point escape, gives `.` ICU's
/// meaning (any code point but a line terminator), and for `[c]` spells each run
/// of literals every way ICU's full case folding allows (`ss` also as `ß`). What
/// ICU reads in a way PostgreSQL cannot reproduce (Unicode classes such as
/// `\p{L}` or `\b`, backreferences, possessive quantifiers, lookaround, inline
/// flags, nested sets, multi-character case folds in sets) is refused with -32602.
enum PostgreSQLPattern {
    /// ICU's line terminators: what `.` does not match and `$` may precede.
    private static let lineTerminators: [ClosedRange<UInt32>] = [0x0A...0x0D, 0x85...0x85, 0x2028...0x2029]

    /// `pattern` as an anchored PostgreSQL regular expression.
    ///
    /// - Throws: -32602 for an invalid pattern or one PostgreSQL cannot run as ICU does.
    static func translate(_ pattern: String, caseInsensitive: Bool) throws(RPCError) -> String {
        do {
            _ = try NSRegularExpression(pattern: pattern)
        } catch {
            throw .invalidParams("MATCHES needs a valid regular expression, got '\(pattern)'", field: "predicate")
        }
        var translator = Translator(scalars: Array(pattern.unicodeScalars), caseInsensitive: caseInsensitive)
        let body = try translator.translate()
        let terminator = "(?:\\u000d\\u000a|" + set(lineTerminators, negated: false) + ")"
        return "^(?:" + body + ")" + terminator + "?$"
    }

    /// A code point as an ARE character-entry escape (letters and digits as themselves).
    static func escape(_ value: UInt32) -> String {
        if (0x30...0x39).contains(value) || (0x41...0x5A).contains(value) || (0x61...0x7A).contains(value) {
            return String(UnicodeScalar(UInt8(value)))
        }
        return value <= 0xFFFF ? "\\u" + hex(value, 4) : "\\U" + hex(value, 8)
    }

    private static func hex(_ value: UInt32, _ width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    /// A bracket expression of `ranges`.
    static func set(_ ranges: [ClosedRange<UInt32>], negated: Bool) -> String {
        var text = negated ? "[^" : "["
        for range in ranges {
            text +=
                range.lowerBound == range.upperBound
                ? escape(range.lowerBound) : "\(escape(range.lowerBound))-\(escape(range.upperBound))"
        }
        return text + "]"
    }

    /// Sorted, merged ranges of `values`.
    static func ranges(_ values: some Sequence<UInt32>) -> [ClosedRange<UInt32>] {
        var result: [ClosedRange<UInt32>] = []
        for value in Set(values).sorted() {
            if let last = result.last, last.upperBound &+ 1 == value {
                result[result.count - 1] = last.lowerBound...value
            } else {
                result.append(value...value)
            }
        }
        return result
    }

    /// Merged ranges.
    static func merged(_ ranges: [ClosedRange<UInt32>]) -> [ClosedRange<UInt32>] {
        var result: [ClosedRange<UInt32>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, range.lowerBound <= last.upperBound &+ 1 {
                result[result.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                result.append(range)
            }
        }
        return result
    }

    /// The complement of merged `ranges` within the code points.
    static func complement(_ ranges: [ClosedRange<UInt32>]) -> [ClosedRange<UInt32>] {
        var result: [ClosedRange<UInt32>] = []
        var next: UInt32 = 0
        for range in merged(ranges) {
            if range.lowerBound > next { result.append(next...(range.lowerBound - 1)) }
            next = range.upperBound + 1
        }
        if next <= 0x10FFFF { result.append(next...0x10FFFF) }
        return result
    }

    /// ICU's `\d`, `\s` and `\w` (ICU's user guide) and their negations `\D`, `\S`, `\W`, from the standard
    /// library's Unicode tables as far as ICU agrees; nil for another letter.
    static func shorthand(_ letter: Unicode.Scalar) -> [ClosedRange<UInt32>]? {
        let members: [ClosedRange<UInt32>]
        switch letter {
        case "d", "D": members = digits
        case "s", "S": members = spaces
        case "w", "W": members = wordCharacters
        default: return nil
        }
        return letter.properties.isUppercase ? complement(members) : members
    }

    /// `\d`: `\p{Nd}`.
    static let digits = confirmed(scalars { $0.generalCategory == .decimalNumber }, by: "\\d")

    /// `\s`: `\p{White_Space}`.
    static let spaces = confirmed(scalars(\.isWhitespace), by: "\\s")

    /// `\w`: `[\p{Alphabetic}\p{Mark}\p{Decimal_Number}\p{Connector_Punctuation}\u200c\u200d]`.
    static let wordCharacters = confirmed(
        merged(
            scalars {
                $0.isAlphabetic || [.nonspacingMark, .spacingMark, .enclosingMark].contains($0.generalCategory)
                    || $0.generalCategory == .decimalNumber || $0.generalCategory == .connectorPunctuation
            } + [0x200C...0x200D]), by: "\\w")

    /// The parts of `ranges` that ICU's `shorthand` matches too: the standard library may know a newer
    /// Unicode than Foundation's ICU (code points ICU has not assigned yet are not in its classes).
    private static func confirmed(_ ranges: [ClosedRange<UInt32>], by shorthand: String) -> [ClosedRange<UInt32>] {
        guard let expression = try? NSRegularExpression(pattern: "^(?:\(shorthand))+$") else { return ranges }
        func allMatch(_ range: ClosedRange<UInt32>) -> Bool {
            var text = ""
            for value in range { if let scalar = Unicode.Scalar(value) { text.unicodeScalars.append(scalar) } }
            return expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }
        var result: [ClosedRange<UInt32>] = []
        var pending = ranges
        while let range = pending.popLast() {
            if allMatch(range) {
                result.append(range)
            } else if range.lowerBound < range.upperBound {
                let middle = range.lowerBound + (range.upperBound - range.lowerBound) / 2
                pending += [range.lowerBound...middle, (middle + 1)...range.upperBound]
            }
        }
        return merged(result)
    }

    /// The code points whose properties pass `test`, as ranges.
    private static func scalars(_ test: (Unicode.Scalar.Properties) -> Bool) -> [ClosedRange<UInt32>] {
        var values: [UInt32] = []
        for value in UInt32(0)...0x10FFFF {
            if let scalar = Unicode.Scalar(value), test(scalar.properties) { values.append(value) }
        }
        return ranges(values)
    }

    /// The code points ICU's case-insensitive matching pairs with `scalar` (itself
    /// included), or nil when its case fold has several code points (`ß` → `ss`).
    static func caseVariants(_ scalar: Unicode.Scalar) -> [UInt32]? {
        let folded = PredicateText.fold(String(scalar), 1)
        guard folded.unicodeScalars.count == 1 else { return nil }
        var candidates = Set(PostgreSQLFunctions.caseFoldSources[folded] ?? [])
        candidates.insert(scalar.value)
        candidates.insert(folded.unicodeScalars.first!.value)
        // Keep those ICU itself pairs with the scalar.
        guard
            let expression = try? NSRegularExpression(
                pattern: "^\\x{\(hex(scalar.value, 1))}$", options: .caseInsensitive)
        else { return [scalar.value] }
        return candidates.filter { value in
            guard let candidate = Unicode.Scalar(value) else { return false }
            let text = String(candidate)
            return expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }.sorted()
    }

    /// A run of literals under `[c]`, as ICU matches it: any text whose full case fold equals the run's
    /// (`first` also matches `ﬁrst`, `ß` also `SS`). Each folded code point is matched by its case variants, and
    /// where several folded code points are the fold of one character (`ss`, `ß`), that character is an
    /// alternative. `isAtom`: the regex is one class or one group (a quantifier may follow it).
    static func caseInsensitiveRun(_ values: [UInt32], refuse: (String) -> RPCError) throws(RPCError) -> (
        regex: String, isAtom: Bool
    ) {
        guard !values.isEmpty else { return ("", true) }
        var folded: [UInt32] = []
        for value in values {
            guard let scalar = Unicode.Scalar(value) else { throw refuse("an invalid code point") }
            folded += PredicateText.fold(String(scalar), 1).unicodeScalars.map(\.value)
        }
        let sources = PostgreSQLFunctions.multipleCaseFoldSources
        // Where the fold of one character starts (and how long it is); no segment boundary falls inside one.
        var starts: [Int: [[UInt32]]] = [:]
        var isBoundary = Array(repeating: true, count: folded.count + 1)
        for start in folded.indices {
            for target in sources.keys where folded[start...].starts(with: target) {
                starts[start, default: []].append(target)
                for inside in (start + 1)..<(start + target.count) { isBoundary[inside] = false }
            }
        }
        func single(_ value: UInt32) throws(RPCError) -> String {
            guard let scalar = Unicode.Scalar(value), let variants = caseVariants(scalar) else {
                throw refuse("'\(Unicode.Scalar(value).map(String.init) ?? "?")' with [c]")
            }
            return variants.count == 1 ? escape(value) : set(ranges(variants), negated: false)
        }
        // The regex for folded[index..<end], every way of spelling it.
        func spelling(from index: Int, to end: Int) throws(RPCError) -> String {
            if index == end { return "" }
            var alternatives = [try single(folded[index]) + (try spelling(from: index + 1, to: end))]
            for target in starts[index] ?? [] where index + target.count <= end {
                let characters = set(ranges(sources[target] ?? []), negated: false)
                alternatives.append(characters + (try spelling(from: index + target.count, to: end)))
            }
            let text = alternatives.count == 1 ? alternatives[0] : "(?:" + alternatives.joined(separator: "|") + ")"
            guard text.utf8.count <= 20_000 else { throw refuse("this [c] pattern (its case folds overlap too much)") }
            return text
        }
        var segments: [String] = []
        var segmentStart = 0
        for boundary in 1...folded.count where isBoundary[boundary] {
            segments.append(try spelling(from: segmentStart, to: boundary))
            segmentStart = boundary
        }
        return (segments.joined(), segments.count == 1)
    }

    /// Reads an ICU pattern and writes the ARE.
    private struct Translator {
        let scalars: [Unicode.Scalar]
        let caseInsensitive: Bool
        var position = 0
        /// Under `[c]`, the literals read since the last other token: ICU matches a run of literals as
        /// a string, by full case folding (`ss` matches `ß`), so they are written together.
        var pending: [UInt32] = []

        init(scalars: [Unicode.Scalar], caseInsensitive: Bool) {
            self.scalars = scalars
            self.caseInsensitive = caseInsensitive
        }

        func refuse(_ what: String) -> RPCError {
            .invalidParams(
                "MATCHES on PostgreSQL cannot run \(what) as ICU does (see docs/cluster.md, Predicates on PostgreSQL)",
                field: "predicate")
        }

        var peek: Unicode.Scalar? { position < scalars.count ? scalars[position] : nil }

        mutating func translate() throws(RPCError) -> String {
            var output = ""
            while let scalar = peek {
                position += 1
                switch scalar {
                case "\\":
                    output += try escapeSequence(inSet: false)
                case ".":
                    output += try flush()
                    output += PostgreSQLPattern.set(PostgreSQLPattern.lineTerminators, negated: true)
                case "^":
                    output += try flush()
                    output += "^"
                case "$":
                    output += try flush()
                    output +=
                        "(?=(?:\\u000d\\u000a|"
                        + PostgreSQLPattern.set(PostgreSQLPattern.lineTerminators, negated: false) + ")?$)"
                case "(":
                    output += try flush()
                    if peek == "?" {
                        guard position + 1 < scalars.count, scalars[position + 1] == ":" else {
                            throw refuse(
                                "the group '(?\(position + 1 < scalars.count ? String(scalars[position + 1]) : "")'")
                        }
                        position += 2
                        output += "(?:"
                    } else {
                        output += "("
                    }
                case ")", "|":
                    output += try flush()
                    output += String(scalar)
                case "*", "+", "?":
                    output += try flushQuantified() + String(scalar) + (try quantifierSuffix())
                case "{":
                    output += try flushQuantified() + (try interval()) + (try quantifierSuffix())
                case "[":
                    output += try flush()
                    output += try bracket()
                default:
                    output += try literal(scalar.value)
                }
            }
            return output + (try flush())
        }

        /// `?` (lazy) after a quantifier is kept; `+` (possessive) is refused.
        mutating func quantifierSuffix() throws(RPCError) -> String {
            if peek == "?" {
                position += 1
                return "?"
            }
            if peek == "+" { throw refuse("a possessive quantifier") }
            return ""
        }

        /// `{n}`, `{n,}`, `{n,m}` with bounds PostgreSQL accepts (at most 255).
        mutating func interval() throws(RPCError) -> String {
            var text = ""
            while let scalar = peek, scalar != "}" {
                guard scalar == "," || ("0"..."9").contains(scalar) else { throw refuse("the interval '{\(text)'") }
                text.unicodeScalars.append(scalar)
                position += 1
            }
            guard peek == "}" else { throw refuse("the interval '{\(text)'") }
            position += 1
            let bounds = text.split(separator: ",", omittingEmptySubsequences: false)
            guard (1...2).contains(bounds.count), let low = Int(bounds[0]), low <= 255,
                bounds.count == 1 || bounds[1].isEmpty || (Int(bounds[1]).map { $0 <= 255 && $0 >= low } ?? false)
            else { throw refuse("the interval '{\(text)}' (PostgreSQL allows bounds up to 255)") }
            return "{\(text)}"
        }

        /// A literal code point; under `[c]` it joins the pending run.
        mutating func literal(_ value: UInt32) throws(RPCError) -> String {
            guard caseInsensitive else { return PostgreSQLPattern.escape(value) }
            pending.append(value)
            return ""
        }

        /// The pending run of literals, written.
        mutating func flush() throws(RPCError) -> String {
            defer { pending = [] }
            return try PostgreSQLPattern.caseInsensitiveRun(pending, refuse: refuse).regex
        }

        /// The pending run before a quantifier: the quantifier applies to the last literal alone (a unit of its own).
        mutating func flushQuantified() throws(RPCError) -> String {
            guard let last = pending.popLast() else { return "" }
            let before = try flush()
            let unit = try PostgreSQLPattern.caseInsensitiveRun([last], refuse: refuse)
            return before + (unit.isAtom ? unit.regex : "(?:\(unit.regex))")
        }

        /// The escape after a `\`: a literal, or a class.
        mutating func escapeSequence(inSet: Bool) throws(RPCError) -> String {
            guard let scalar = peek else { return try literal(0x5C) }
            position += 1
            if let value = try escapedValue(scalar) {
                return inSet ? PostgreSQLPattern.escape(value) : try literal(value)
            }
            if let ranges = PostgreSQLPattern.shorthand(scalar) {
                return inSet
                    ? String(PostgreSQLPattern.set(ranges, negated: false).dropFirst().dropLast())
                    : (try flush()) + PostgreSQLPattern.set(ranges, negated: false)
            }
            if scalar == "Q" {
                var output = ""
                while position < scalars.count {
                    if scalars[position] == "\\", position + 1 < scalars.count, scalars[position + 1] == "E" {
                        position += 2
                        break
                    }
                    output +=
                        inSet ? PostgreSQLPattern.escape(scalars[position].value) : try literal(scalars[position].value)
                    position += 1
                }
                return output
            }
            throw refuse("'\\\(scalar)'")
        }

        /// The code point an escape stands for, or nil for a class or an assertion.
        mutating func escapedValue(_ scalar: Unicode.Scalar) throws(RPCError) -> UInt32? {
            switch scalar {
            case "t": return 0x09
            case "n": return 0x0A
            case "r": return 0x0D
            case "f": return 0x0C
            case "a": return 0x07
            case "e": return 0x1B
            case "u": return try hexDigits(exactly: 4)
            case "U": return try hexDigits(exactly: 8)
            case "x":
                if peek == "{" {
                    position += 1
                    var digits = ""
                    while let next = peek, next != "}" {
                        digits.unicodeScalars.append(next)
                        position += 1
                    }
                    position += 1
                    guard let value = UInt32(digits, radix: 16), Unicode.Scalar(value) != nil else {
                        throw refuse("'\\x{\(digits)}'")
                    }
                    return value
                }
                return try hexDigits(exactly: 2)
            default:
                // Any other ASCII letter or digit is a class, an assertion or a backreference.
                if scalar.isASCII, scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) { return nil }
                return scalar.value
            }
        }

        mutating func hexDigits(exactly count: Int) throws(RPCError) -> UInt32 {
            guard position + count <= scalars.count,
                let value = UInt32(String(String.UnicodeScalarView(scalars[position..<position + count])), radix: 16),
                Unicode.Scalar(value) != nil
            else { throw refuse("an escape with \(count) hexadecimal digits") }
            position += count
            return value
        }

        /// A set `[…]` of literals, ranges and `\d`-style classes, optionally negated; no nesting or set operations.
        mutating func bracket() throws(RPCError) -> String {
            var negated = false
            if peek == "^" {
                negated = true
                position += 1
            }
            var ranges: [ClosedRange<UInt32>] = []
            var classes = ""
            var first = true
            var previous: UInt32?
            while true {
                guard let scalar = peek else { throw refuse("an unterminated set") }
                position += 1
                if scalar == "]" && !first { break }
                first = false
                switch scalar {
                case "[", "]": throw refuse("a nested set or a set starting with ']'")
                case "&" where peek == "&": throw refuse("a set intersection '&&'")
                case "-" where peek == "-": throw refuse("a set difference '--'")
                case "-" where previous != nil && peek != "]":
                    guard let high = peek else { throw refuse("an unterminated set") }
                    position += 1
                    let upper: UInt32
                    if high == "\\" {
                        guard let escaped = peek else { throw refuse("an unterminated set") }
                        position += 1
                        guard let value = try escapedValue(escaped) else { throw refuse("a range ending in a class") }
                        upper = value
                    } else if high == "[" {
                        throw refuse("a nested set")
                    } else {
                        upper = high.value
                    }
                    guard let low = previous, low <= upper else { throw refuse("a reversed range") }
                    ranges.append(low...upper)
                    previous = nil
                    continue
                case "\\":
                    guard let escaped = peek else { throw refuse("an unterminated set") }
                    position += 1
                    if let value = try escapedValue(escaped) {
                        ranges.append(value...value)
                        previous = value
                    } else if let shorthand = PostgreSQLPattern.shorthand(escaped) {
                        if caseInsensitive && escaped.properties.isUppercase {
                            throw refuse("a negated class in a set with [c]")
                        }
                        classes += String(PostgreSQLPattern.set(shorthand, negated: false).dropFirst().dropLast())
                        previous = nil
                    } else {
                        throw refuse("'\\\(escaped)' in a set")
                    }
                    continue
                default:
                    ranges.append(scalar.value...scalar.value)
                    previous = scalar.value
                }
            }
            if caseInsensitive {
                var values: [UInt32] = []
                var total = 0
                for range in ranges {
                    total += Int(range.upperBound - range.lowerBound) + 1
                    guard total <= 5000 else { throw refuse("a set of more than 5000 characters with [c]") }
                    for value in range {
                        guard let scalar = Unicode.Scalar(value) else { continue }
                        guard let variants = PostgreSQLPattern.caseVariants(scalar) else {
                            throw refuse("'\(scalar)' with [c] (it case-folds to several characters)")
                        }
                        values += variants
                    }
                }
                ranges = PostgreSQLPattern.ranges(values)
            }
            let body = PostgreSQLPattern.merged(ranges).map { range in
                range.lowerBound == range.upperBound
                    ? PostgreSQLPattern.escape(range.lowerBound)
                    : "\(PostgreSQLPattern.escape(range.lowerBound))-\(PostgreSQLPattern.escape(range.upperBound))"
            }.joined()
            if body.isEmpty && classes.isEmpty { throw refuse("an empty set") }
            return (negated ? "[^" : "[") + body + classes + "]"
        }
    }
}
