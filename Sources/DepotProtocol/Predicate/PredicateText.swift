import Foundation

/// The string semantics of predicates, shared by the SQL functions the store
/// registers and the in-memory evaluator, so that both give the same answer.
public enum PredicateText {
    /// `[c]` → case folding, `[d]` → diacritic folding (the options' raw bits).
    public static func fold(_ text: String, _ flags: Int) -> String {
        var options: String.CompareOptions = []
        if flags & 1 != 0 { options.insert(.caseInsensitive) }
        if flags & 2 != 0 { options.insert(.diacriticInsensitive) }
        guard !options.isEmpty else { return text }
        return text.folding(options: options, locale: nil)
    }

    /// An NSPredicate `LIKE` pattern (`*`, `?`, `\` escapes) as a SQLite `GLOB` pattern.
    public static func glob(_ pattern: String) -> String {
        var result = ""
        var escaped = false
        // Scalar by scalar: `*` or `\` before a combining mark is still a wildcard or an escape.
        for character in pattern.unicodeScalars.map(Character.init) {
            if escaped {
                result +=
                    character == "*" || character == "?" || character == "[" ? "[\(character)]" : String(character)
                escaped = false
                continue
            }
            switch character {
            case "\\": escaped = true
            case "[": result += "[[]"
            default: result.append(character)
            }
        }
        if escaped { result += "\\" }
        return result
    }

    /// `text` as a GLOB pattern that matches exactly itself (for BEGINSWITH and ENDSWITH).
    public static func globLiteral(_ text: String) -> String {
        // Scalar by scalar: a `*` followed by a combining mark (one `Character`) is still a `*`
        // to GLOB, and must be escaped (found by Fuzz/FuzzPredicate with look-alike text).
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "*", "?", "[": result += "[\(scalar)]"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Compiled regular expressions, per connection.
    public final class RegexCache: @unchecked Sendable {
        private let lock = NSLock()
        /// By pattern bytes: two spellings of a pattern are two expressions (ICU matches code points).
        private var expressions: [ByteString: NSRegularExpression] = [:]

        /// Creates an empty cache.
        public init() {}

        /// The compiled, anchored expression for `pattern`, or nil when it is invalid.
        public func expression(_ pattern: String, caseInsensitive: Bool) -> NSRegularExpression? {
            let key = ByteString((caseInsensitive ? "i:" : "s:") + pattern)
            return lock.withLock {
                if let cached = expressions[key] { return cached }
                guard
                    let compiled = try? NSRegularExpression(
                        pattern: "^(?:" + pattern + ")$", options: caseInsensitive ? [.caseInsensitive] : [])
                else { return nil }
                if expressions.count > 256 { expressions.removeAll() }
                expressions[key] = compiled
                return compiled
            }
        }
    }

    /// The longest one `MATCHES` may run on one value: a pattern that backtracks
    /// without end (`(a+)+$`) is stopped there instead of holding a reader.
    public static let matchBudget = Duration.milliseconds(250)

    /// The start of the message of a `MATCHES` stopped by ``matchBudget`` (the store
    /// recognises it in SQLite's error to answer -32602).
    public static let matchTimeoutPrefix = "MATCHES stopped:"

    /// A `MATCHES` that ran past ``matchBudget`` on one value.
    public struct MatchTimeout: Error, CustomStringConvertible, Sendable {
        /// The pattern.
        public let pattern: String
        /// How long the value was, in characters.
        public let length: Int

        public var description: String {
            "\(PredicateText.matchTimeoutPrefix) the pattern '\(pattern)' ran longer than \(PredicateText.matchBudget) on one value (\(length) characters); simplify it (it backtracks too much)"
        }

        /// The error a client gets: -32602 naming the predicate.
        public var rpcError: RPCError { .invalidParams(description, field: "predicate") }
    }

    /// Whether `text` matches `pattern` whole (NSPredicate `MATCHES`).
    ///
    /// - Throws: ``MatchTimeout`` when matching one value takes longer than ``matchBudget``.
    public static func matches(_ text: String, _ pattern: String, flags: Int, cache: RegexCache) throws(MatchTimeout)
        -> Bool
    {
        let subject = flags & 2 != 0 ? fold(text, 2) : text
        guard let expression = cache.expression(pattern, caseInsensitive: flags & 1 != 0) else { return false }
        let range = NSRange(subject.startIndex..., in: subject)
        let start = ContinuousClock.now
        var matched = false
        var timedOut = false
        // .reportProgress calls back now and then during a long match, so it can be stopped.
        expression.enumerateMatches(in: subject, options: [.anchored, .reportProgress], range: range) {
            result, _, stop in
            if result != nil {
                matched = true
                stop.pointee = true
            } else if ContinuousClock.now - start > matchBudget {
                timedOut = true
                stop.pointee = true
            }
        }
        if timedOut { throw MatchTimeout(pattern: pattern, length: range.length) }
        return matched
    }

}
