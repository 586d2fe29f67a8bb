import Foundation
import GRDB
import Synchronization

/// The SQL functions compiled predicates call, registered on every connection.
///
/// SQLite's own `LIKE` and `lower()` fold only ASCII; these fold Unicode the
/// way the in-memory evaluator does, so `[c]` and `[d]` mean the same in both.
enum PredicateFunctions {
    /// `[c]` → case folding, `[d]` → diacritic folding (the options' raw bits).
    static func fold(_ text: String, _ flags: Int) -> String {
        var options: String.CompareOptions = []
        if flags & 1 != 0 { options.insert(.caseInsensitive) }
        if flags & 2 != 0 { options.insert(.diacriticInsensitive) }
        guard !options.isEmpty else { return text }
        return text.folding(options: options, locale: nil)
    }

    /// An NSPredicate `LIKE` pattern (`*`, `?`, `\` escapes) as a SQLite `GLOB` pattern.
    static func glob(_ pattern: String) -> String {
        var result = ""
        var escaped = false
        for character in pattern {
            if escaped {
                result += character == "*" || character == "?" || character == "[" ? "[\(character)]" : String(character)
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
    static func globLiteral(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "*", "?", "[": result += "[\(character)]"
            default: result.append(character)
            }
        }
        return result
    }

    /// Compiled regular expressions, per connection.
    final class RegexCache: @unchecked Sendable {
        private let lock = NSLock()
        private var expressions: [String: NSRegularExpression] = [:]

        func expression(_ pattern: String, caseInsensitive: Bool) -> NSRegularExpression? {
            let key = (caseInsensitive ? "i:" : "s:") + pattern
            return lock.withLock {
                if let cached = expressions[key] { return cached }
                guard let compiled = try? NSRegularExpression(pattern: "^(?:" + pattern + ")$", options: caseInsensitive ? [.caseInsensitive] : []) else { return nil }
                if expressions.count > 256 { expressions.removeAll() }
                expressions[key] = compiled
                return compiled
            }
        }
    }

    /// Whether `text` matches `pattern` whole (NSPredicate `MATCHES`).
    static func matches(_ text: String, _ pattern: String, flags: Int, cache: RegexCache) -> Bool {
        let subject = flags & 2 != 0 ? fold(text, 2) : text
        guard let expression = cache.expression(pattern, caseInsensitive: flags & 1 != 0) else { return false }
        let range = NSRange(subject.startIndex..., in: subject)
        return expression.firstMatch(in: subject, options: [.anchored], range: range) != nil
    }

    static func register(in db: Database) {
        db.add(function: DatabaseFunction("depot_fold", argumentCount: 2, pure: true) { values in
            guard let text = String.fromDatabaseValue(values[0]) else { return nil }
            return fold(text, Int.fromDatabaseValue(values[1]) ?? 0)
        })
        db.add(function: DatabaseFunction("depot_glob", argumentCount: 1, pure: true) { values in
            String.fromDatabaseValue(values[0]).map(glob)
        })
        db.add(function: DatabaseFunction("depot_glob_literal", argumentCount: 1, pure: true) { values in
            String.fromDatabaseValue(values[0]).map(globLiteral)
        })
        let cache = RegexCache()
        db.add(function: DatabaseFunction("depot_matches", argumentCount: 3, pure: true) { values in
            guard let text = String.fromDatabaseValue(values[0]), let pattern = String.fromDatabaseValue(values[1]) else { return nil }
            return matches(text, pattern, flags: Int.fromDatabaseValue(values[2]) ?? 0, cache: cache)
        })
    }
}
