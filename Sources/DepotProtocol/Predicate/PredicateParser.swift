/// Parses the `NSPredicate` format language into a ``PredicateNode``, binding
/// `$variables` from an arguments object and `%@ %K %d %f` from an arguments
/// array as it goes. Precedence as NSPredicate: NOT binds tighter than AND,
/// AND tighter than OR; keywords are case-insensitive; `#key` escapes a key
/// that is spelled like a keyword.
public struct PredicateParser {
    /// The deepest nesting of parentheses, lists, NOT and SUBQUERY accepted.
    public static let maximumDepth = 100

    /// The most NOT nested in one another.
    ///
    /// Each NOT is a nested `(NOT (…))` in SQL, and SQLite's parser stack
    /// (`YYSTACKDEPTH` 100) overflows at about 50 of them ("parser stack
    /// overflow": found by `Fuzz/FuzzPredicate` with 53 `!`).
    public static let maximumNegationDepth = 32

    private var lexer: PredicateLexer
    private var tokens: [PredicateToken] = []
    private var index = 0
    private var depth = 0
    private var negationDepth = 0
    private let named: [String: JSONValue]
    private let positional: [JSONValue]
    private var nextPositional = 0
    private var subqueryVariables: [String] = []

    /// Parses `text` with `arguments` (an object for `$name`, an array for `%@`).
    public static func parse(_ text: String, arguments: JSONValue? = nil) throws(RPCError) -> PredicateNode {
        var parser = try PredicateParser(text, arguments: arguments)
        return try parser.parseAll()
    }

    private init(_ text: String, arguments: JSONValue?) throws(RPCError) {
        lexer = PredicateLexer(text)
        switch arguments {
        case .object(let members)?: named = members; positional = []
        case .array(let elements)?: named = [:]; positional = elements
        case nil, .null?: named = [:]; positional = []
        case let other?:
            throw .invalidParams(
                "arguments must be an object (for $variables) or an array (for %@), got \(other.typeName)",
                field: "arguments")
        }
        tokens = try lexer.tokens()
    }

    private var current: PredicateToken { tokens[index] }

    private mutating func advance() { if index < tokens.count - 1 { index += 1 } }

    private func describe(_ token: PredicateToken) -> String {
        switch token.kind {
        case .identifier(let name): "'\(name)'"
        case .string(let text): "the string '\(text)'"
        case .number(let value): "the number \(value.excerpt())"
        case .variable(let name): "$\(name)"
        case .formatArgument(let specifier): "%\(specifier)"
        case .symbol(let symbol): "'\(symbol)'"
        case .end: "the end of the predicate"
        }
    }

    private func error(expected: String) -> RPCError {
        lexer.syntaxError(current.position, expected: expected, found: describe(current))
    }

    private func isKeyword(_ keyword: String) -> Bool {
        if case .identifier(let name) = current.kind, name.count == keyword.count,
            name.uppercased() == keyword, !isEscaped
        {
            return true
        }
        return false
    }

    /// Whether the current identifier was written `#name` (never a keyword).
    private var isEscaped: Bool {
        current.position < lexer.characters.count && lexer.characters[current.position] == "#"
    }

    private func isSymbol(_ symbol: String) -> Bool { current.kind == .symbol(symbol) }

    private mutating func expectSymbol(_ symbol: String) throws(RPCError) {
        guard isSymbol(symbol) else { throw error(expected: "'\(symbol)'") }
        advance()
    }

    private mutating func enter() throws(RPCError) {
        depth += 1
        if depth > Self.maximumDepth {
            throw lexer.syntaxError(current.position, expected: "less nesting (at most \(Self.maximumDepth) levels)")
        }
    }

    private mutating func parseAll() throws(RPCError) -> PredicateNode {
        let node = try parseOr()
        guard current.kind == .end else { throw error(expected: "AND, OR or the end of the predicate") }
        if nextPositional < positional.count {
            throw .invalidParams(
                "the predicate uses \(nextPositional) of the \(positional.count) arguments given", field: "arguments")
        }
        return node
    }

    private mutating func parseOr() throws(RPCError) -> PredicateNode {
        var parts = [try parseAnd()]
        while isKeyword("OR") || isSymbol("||") {
            advance()
            parts.append(try parseAnd())
        }
        return parts.count == 1 ? parts[0] : .or(parts)
    }

    private mutating func parseAnd() throws(RPCError) -> PredicateNode {
        var parts = [try parseNot()]
        while isKeyword("AND") || isSymbol("&&") {
            advance()
            parts.append(try parseNot())
        }
        return parts.count == 1 ? parts[0] : .and(parts)
    }

    private mutating func parseNot() throws(RPCError) -> PredicateNode {
        if isKeyword("NOT") || isSymbol("!") {
            try enter()
            negationDepth += 1
            if negationDepth > Self.maximumNegationDepth {
                throw lexer.syntaxError(
                    current.position, expected: "fewer nested NOT (at most \(Self.maximumNegationDepth))")
            }
            advance()
            let inner = try parseNot()
            depth -= 1
            negationDepth -= 1
            return .not(inner)
        }
        return try parsePrimary()
    }

    private mutating func parsePrimary() throws(RPCError) -> PredicateNode {
        if isSymbol("(") {
            try enter()
            advance()
            let inner = try parseOr()
            try expectSymbol(")")
            depth -= 1
            return inner
        }
        if isKeyword("TRUEPREDICATE") {
            advance()
            return .constant(true)
        }
        if isKeyword("FALSEPREDICATE") {
            advance()
            return .constant(false)
        }
        return .comparison(try parseComparison())
    }

    private mutating func parseComparison() throws(RPCError) -> Comparison {
        let position = current.position
        var modifier: Comparison.Modifier?
        if isKeyword("ANY") || isKeyword("SOME") {
            modifier = .any
        } else if isKeyword("ALL") {
            modifier = .all
        } else if isKeyword("NONE") {
            modifier = Comparison.Modifier.none
        }
        if modifier != nil { advance() }
        let lhs = try parseExpression()
        let op = try parseOperator()
        let options = try parseOptions()
        let rhs = try parseExpression()
        if op == .between {
            guard case .list(let bounds) = rhs, bounds.count == 2 else {
                throw lexer.syntaxError(position, expected: "BETWEEN {lower, upper}")
            }
        }
        return Comparison(modifier: modifier, lhs: lhs, op: op, rhs: rhs, options: options, position: position)
    }

    private mutating func parseOperator() throws(RPCError) -> Comparison.Operator {
        let symbols: [String: Comparison.Operator] = [
            "==": .equal, "=": .equal, "!=": .notEqual, "<>": .notEqual, "<": .less, "<=": .lessOrEqual,
            "=<": .lessOrEqual,
            ">": .greater, ">=": .greaterOrEqual, "=>": .greaterOrEqual,
        ]
        if case .symbol(let symbol) = current.kind, let op = symbols[symbol] {
            advance()
            return op
        }
        let words: [String: Comparison.Operator] = [
            "BETWEEN": .between, "IN": .in, "BEGINSWITH": .beginsWith, "ENDSWITH": .endsWith, "CONTAINS": .contains,
            "LIKE": .like, "MATCHES": .matches,
        ]
        if case .identifier(let name) = current.kind, !isEscaped, let op = words[name.uppercased()] {
            advance()
            return op
        }
        throw error(
            expected:
                "a comparison operator (==, !=, <, <=, >, >=, BETWEEN, IN, BEGINSWITH, ENDSWITH, CONTAINS, LIKE, MATCHES)"
        )
    }

    private mutating func parseOptions() throws(RPCError) -> Comparison.Options {
        guard isSymbol("[") else { return [] }
        advance()
        guard case .identifier(let letters) = current.kind else { throw error(expected: "c, d or cd inside [ ]") }
        var options: Comparison.Options = []
        for letter in letters.lowercased() {
            switch letter {
            case "c": options.insert(.caseInsensitive)
            case "d": options.insert(.diacriticInsensitive)
            case "n", "l": break  // normalized / locale-sensitive: accepted, no effect
            default: throw error(expected: "c, d or cd inside [ ]")
            }
        }
        advance()
        try expectSymbol("]")
        return options
    }

    // MARK: Expressions

    private mutating func parseExpression() throws(RPCError) -> PredicateExpression {
        let token = current
        switch token.kind {
        case .string(let text):
            advance()
            return .value(.string(text))
        case .number(let value):
            advance()
            return .value(value)
        case .variable(let name):
            advance()
            if subqueryVariables.contains(name) {
                return try parseKeyPathTail(["$" + name])
            }
            guard let value = named[name] else {
                throw .invalidParams(
                    "the predicate uses $\(name), which arguments does not define", field: "arguments.\(name)")
            }
            return Self.expression(for: value)
        case .formatArgument(let specifier):
            advance()
            guard nextPositional < positional.count else {
                throw .invalidParams(
                    "the predicate has more format arguments (%\(specifier) at character \(token.position)) than the \(positional.count) arguments given",
                    field: "arguments")
            }
            let value = positional[nextPositional]
            nextPositional += 1
            switch specifier {
            case "K":
                guard case .string(let keyPath) = value, !keyPath.isEmpty else {
                    throw .invalidParams(
                        "%K needs a key path string, got \(value.excerpt())", field: "arguments[\(nextPositional - 1)]")
                }
                return try parseKeyPathTail(
                    keyPath.split(separator: ".", omittingEmptySubsequences: false).map(String.init))
            case "d", "i":
                guard let number = value.intValue else {
                    throw .invalidParams(
                        "%\(specifier) needs an integer, got \(value.excerpt())",
                        field: "arguments[\(nextPositional - 1)]")
                }
                return .value(.int(number))
            case "f":
                guard let number = value.doubleValue else {
                    throw .invalidParams(
                        "%f needs a number, got \(value.excerpt())", field: "arguments[\(nextPositional - 1)]")
                }
                return .value(.double(number))
            default:
                return Self.expression(for: value)
            }
        case .symbol("{"):
            // Lists nest like parentheses (`{{{…}}}`: found by Fuzz/FuzzPredicate overflowing the stack).
            try enter()
            defer { depth -= 1 }
            advance()
            var elements: [PredicateExpression] = []
            if !isSymbol("}") {
                elements.append(try parseExpression())
                while isSymbol(",") {
                    advance()
                    elements.append(try parseExpression())
                }
            }
            try expectSymbol("}")
            return .list(elements)
        case .symbol("@"):
            // `@count` etc. applied to nothing is invalid: aggregates follow a key path.
            throw error(expected: "a key path before @")
        case .identifier(let name):
            if !isEscaped {
                switch name.uppercased() {
                case "YES", "TRUE":
                    advance()
                    return .value(.bool(true))
                case "NO", "FALSE":
                    advance()
                    return .value(.bool(false))
                case "NIL", "NULL":
                    advance()
                    return .value(.null)
                case "SUBQUERY":
                    return try parseSubquery()
                case "AND", "OR", "NOT", "IN", "BETWEEN", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "MATCHES",
                    "ANY", "ALL", "NONE", "SOME", "TRUEPREDICATE", "FALSEPREDICATE":
                    throw error(expected: "a key path or a value (escape a key named like a keyword as #\(name))")
                default: break
                }
            }
            advance()
            return try parseKeyPathTail([name])
        default:
            throw error(expected: "a key path or a value")
        }
    }

    /// `.key`, `.@count`, `.@sum.key` after the first component.
    private mutating func parseKeyPathTail(_ start: [String]) throws(RPCError) -> PredicateExpression {
        var path = start
        while isSymbol(".") {
            advance()
            if isSymbol("@") {
                advance()
                guard case .identifier(let name) = current.kind,
                    let function = AggregateFunction(rawValue: name.lowercased())
                else {
                    throw error(expected: "@count, @sum, @avg, @min or @max")
                }
                advance()
                var key: [String] = []
                while isSymbol(".") {
                    advance()
                    guard case .identifier(let component) = current.kind else { throw error(expected: "a key") }
                    key.append(component)
                    advance()
                }
                if function != .count && key.isEmpty {
                    throw error(expected: "a key after @\(function.rawValue), as in players.@\(function.rawValue).age")
                }
                return .aggregate(function: function, collection: path, key: key)
            }
            guard case .identifier(let component) = current.kind else { throw error(expected: "a key after '.'") }
            path.append(component)
            advance()
        }
        if isSymbol("@") {
            throw error(expected: "'.' before @")
        }
        return .keyPath(path)
    }

    /// `SUBQUERY(collection, $variable, predicate).@count`.
    private mutating func parseSubquery() throws(RPCError) -> PredicateExpression {
        try enter()
        advance()
        try expectSymbol("(")
        guard case .keyPath(let collection) = try parseExpression() else {
            throw error(expected: "a to-many key path as SUBQUERY's collection")
        }
        try expectSymbol(",")
        guard case .variable(let variable) = current.kind else {
            throw error(expected: "a $variable as SUBQUERY's second argument")
        }
        advance()
        try expectSymbol(",")
        subqueryVariables.append(variable)
        let predicate = try parseOr()
        subqueryVariables.removeLast()
        try expectSymbol(")")
        depth -= 1
        try expectSymbol(".")
        try expectSymbol("@")
        guard case .identifier(let name) = current.kind, name.lowercased() == "count" else {
            throw error(expected: "@count after SUBQUERY(...)")
        }
        advance()
        return .subqueryCount(collection: collection, variable: "$" + variable, predicate: predicate)
    }

    /// An argument value: arrays become lists (for IN).
    private static func expression(for value: JSONValue) -> PredicateExpression {
        if case .array(let elements) = value { return .list(elements.map { .value($0) }) }
        return .value(value)
    }
}
