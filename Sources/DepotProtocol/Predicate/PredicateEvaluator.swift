import Foundation

/// Evaluates a ``PredicateNode`` against objects held in memory, with the
/// semantics of the SQL the store compiles it to (docs/predicates.md): Core
/// Data's in-memory rules for nil, bytewise UTF-8 strings, Unicode `[c]`/`[d]`.
///
/// Objects are wire objects (`[String: JSONValue]` with `id` and the keys);
/// relationships are followed through the two closures, so the caller decides
/// where related objects come from (a cache, a fetch).
///
/// ```swift
/// let evaluator = PredicateEvaluator(model: entities, object: { cache[$0] }, toMany: { owner, key in … })
/// let node = try PredicateParser.parse("ANY players.age > 30")
/// let matches = try evaluator.evaluate(node, on: team, entity: "Team")
/// ```
public struct PredicateEvaluator {
    /// An object as on the wire.
    public typealias Object = [String: JSONValue]

    private let entities: [String: EntityDescription]
    private let object: (String) -> Object?
    private let toMany: (Object, String) -> [Object]
    private let regexes = PredicateText.RegexCache()

    /// Creates an evaluator over `model`.
    ///
    /// - Parameters:
    ///   - object: the object with an id (for to-one relationships), or nil.
    ///   - toMany: the objects of an owner's to-many relationship named by the key.
    public init(
        model: [EntityDescription], object: @escaping (String) -> Object?,
        toMany: @escaping (_ owner: Object, _ key: String) -> [Object]
    ) {
        entities = Dictionary(model.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        self.object = object
        self.toMany = toMany
    }

    /// Whether `node` holds for `object` of `entity`.
    public func evaluate(_ node: PredicateNode, on object: Object, entity: String) throws(RPCError) -> Bool {
        guard let description = entities[entity] else {
            throw .invalidParams("unknown entity '\(entity)'", field: "entity")
        }
        return try evaluate(node, Scope(object: object, entity: description, variables: [:]))
    }

    // MARK: Values

    /// A value normalized for comparison, as SQLite stores it.
    enum Scalar: Hashable {
        case null, integer(Int64), real(Double), text(String)

        /// SQLite's ordering: NULL < numbers < text; nil when either is NULL.
        func compare(_ other: Scalar) -> Int? {
            switch (self, other) {
            case (.null, _), (_, .null): return nil
            case (.integer(let a), .integer(let b)): return a < b ? -1 : (a == b ? 0 : 1)
            case (.real(let a), .real(let b)): return a < b ? -1 : (a == b ? 0 : 1)
            case (.integer(let a), .real(let b)): return Double(a) < b ? -1 : (Double(a) == b ? 0 : 1)
            case (.real(let a), .integer(let b)): return a < Double(b) ? -1 : (a == Double(b) ? 0 : 1)
            case (.text(let a), .text(let b)):
                return a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : (a.utf8.elementsEqual(b.utf8) ? 0 : 1)
            case (.text, _): return 1
            case (_, .text): return -1
            }
        }

        /// Equal as stored values of one type: text by its UTF-8 bytes (grouping keys on this).
        static func == (lhs: Scalar, rhs: Scalar) -> Bool {
            switch (lhs, rhs) {
            case (.null, .null): true
            case (.integer(let a), .integer(let b)): a == b
            case (.real(let a), .real(let b)): a == b
            case (.text(let a), .text(let b)): a.bytesEqual(b)
            default: false
            }
        }

        /// Hashes text by its UTF-8 bytes, as ``==`` compares it.
        func hash(into hasher: inout Hasher) {
            switch self {
            case .null: hasher.combine(0 as UInt8)
            case .integer(let number):
                hasher.combine(1 as UInt8)
                hasher.combine(number)
            case .real(let number):
                hasher.combine(2 as UInt8)
                hasher.combine(number)
            case .text(let text):
                hasher.combine(3 as UInt8)
                ByteString.hash(text, into: &hasher)
            }
        }

        /// SQLite's `IS`: NULL is NULL, otherwise equal values.
        func isSame(_ other: Scalar) -> Bool {
            if self == .null || other == .null { return self == other }
            return compare(other) == 0
        }

        var text: String? {
            if case .text(let value) = self { return value }
            return nil
        }
    }

    private struct Scope {
        var object: Object
        var entity: EntityDescription
        var variables: [String: (Object, EntityDescription)]
    }

    /// What a key path leads to.
    private enum Resolved {
        case scalar(Scalar, type: AttributeType?, destination: String?)
        case collection([Object], destination: EntityDescription, remainder: [String])
    }

    private func normalize(_ value: JSONValue, type: AttributeType?, destination: String?) -> Scalar {
        if value.isNull { return .null }
        if destination != nil {
            if case .string(let text) = value, let slash = text.lastIndex(of: "/"),
                let row = Int64(text[text.index(after: slash)...])
            {
                return .integer(row)
            }
            return .null
        }
        switch (type, value) {
        case (.date?, .string(let text)): return ISO8601.seconds(from: text).map { .real($0) } ?? .null
        case (.date?, _): return value.doubleValue.map { .real($0) } ?? .null
        case (.boolean?, .bool(let flag)): return .integer(flag ? 1 : 0)
        case (.uuid?, .string(let text)): return .text(text.lowercased())
        case (.json?, _): return .text(String(decoding: JSONWriter.encode(value), as: UTF8.self))
        case (_, .bool(let flag)): return .integer(flag ? 1 : 0)
        case (_, .int(let number)): return .integer(number)
        case (_, .double(let number)): return .real(number)
        case (_, .string(let text)): return .text(text)
        default: return .text(String(decoding: JSONWriter.encode(value), as: UTF8.self))
        }
    }

    private func resolve(_ path: [String], in scope: Scope) throws(RPCError) -> Resolved {
        var components = path[...]
        var current = scope.object
        var entity = scope.entity
        if let first = components.first, first.hasPrefix("$") {
            guard let variable = scope.variables[first] else {
                throw .invalidParams("unknown variable \(first)", field: "predicate")
            }
            (current, entity) = variable
            components = components.dropFirst()
            if components.isEmpty {
                return .scalar(
                    normalize(current["id"] ?? .null, type: nil, destination: entity.name), type: nil,
                    destination: entity.name)
            }
        }
        while let key = components.first {
            components = components.dropFirst()
            // `SELF` is the object itself; `id` (unless the model has such a key) is its id.
            if key.uppercased() == "SELF" { continue }
            if key == "id", entity.attribute(named: key) == nil, entity.relationship(named: key) == nil {
                guard components.isEmpty else {
                    throw .invalidParams(
                        "unknown key path '\(path.joined(separator: "."))': an object's id has no key '\(components.first!)'",
                        field: "predicate")
                }
                break
            }
            if let attribute = entity.attribute(named: key) {
                return .scalar(
                    normalize(current[key] ?? .null, type: attribute.type, destination: nil), type: attribute.type,
                    destination: nil)
            }
            guard let relationship = entity.relationship(named: key),
                let destination = entities[relationship.destination]
            else {
                throw .invalidParams(
                    "unknown key path '\(path.joined(separator: "."))': \(entity.name) has no key '\(key)'",
                    field: "predicate")
            }
            if relationship.toMany {
                return .collection(toMany(current, key), destination: destination, remainder: Array(components))
            }
            let reference = current[key] ?? .null
            if components.isEmpty {
                return .scalar(
                    normalize(reference, type: nil, destination: destination.name), type: nil,
                    destination: destination.name)
            }
            guard let id = reference.stringValue, let next = object(id) else {
                // A nil to-one yields nil for everything beyond it.
                return .scalar(.null, type: nil, destination: nil)
            }
            current = next
            entity = destination
        }
        return .scalar(
            normalize(current["id"] ?? .null, type: nil, destination: entity.name), type: nil, destination: entity.name)
    }

    /// The value at an attribute key path (through to-one relationships) of
    /// `object`: as on the wire, and as SQL compares and groups it; nil beyond a
    /// nil to-one. The grouped evaluator reads groupBy keys and aggregate keys this way.
    func attributeValue(_ path: [String], on object: Object, entity: String) throws(RPCError) -> (
        wire: JSONValue, scalar: Scalar
    ) {
        guard var description = entities[entity] else {
            throw .invalidParams("unknown entity '\(entity)'", field: "entity")
        }
        var current = object
        for (index, key) in path.enumerated() {
            if let attribute = description.attribute(named: key), index == path.count - 1 {
                let wire = current[key] ?? .null
                var scalar = normalize(wire, type: attribute.type, destination: nil)
                // A double column stores 3 as 3.0: one group, whichever way the wire wrote it.
                if attribute.type == .double, case .integer(let number) = scalar { scalar = .real(Double(number)) }
                return (wire, scalar)
            }
            guard index < path.count - 1, let relationship = description.relationship(named: key),
                !relationship.toMany, let destination = entities[relationship.destination]
            else {
                throw .invalidParams(
                    "'\(path.joined(separator: "."))' is not an attribute key path of \(entity)", field: "keyPath")
            }
            guard let id = current[key]?.stringValue, let next = self.object(id) else { return (.null, .null) }
            current = next
            description = destination
        }
        throw .invalidParams("an empty key path", field: "keyPath")
    }

    // MARK: Predicates

    private func evaluate(_ node: PredicateNode, _ scope: Scope) throws(RPCError) -> Bool {
        switch node {
        case .constant(let value): return value
        case .not(let inner): return !(try evaluate(inner, scope))
        case .and(let parts):
            for part in parts where !(try evaluate(part, scope)) { return false }
            return true
        case .or(let parts):
            for part in parts where try evaluate(part, scope) { return true }
            return false
        case .comparison(let comparison): return try evaluate(comparison, scope)
        }
    }

    private func evaluate(_ comparison: Comparison, _ scope: Scope) throws(RPCError) -> Bool {
        var comparison = comparison
        // `x IN 'text'`: a substring test, as in NSPredicate.
        if comparison.op == .in, let substring = try substringTest(comparison, scope) {
            return try compareScalars(substring, scope)
        }
        comparison = comparison.keyPathOnLeft
        if case .keyPath(let path) = comparison.lhs,
            case .collection(let objects, let destination, let remainder) = try resolve(path, in: scope)
        {
            var element = comparison
            element.modifier = nil
            element.lhs = .keyPath(remainder.isEmpty ? ["$__self"] : remainder)
            var results: [Bool] = []
            for related in objects {
                var inner = Scope(object: related, entity: destination, variables: scope.variables)
                inner.variables["$__self"] = (related, destination)
                results.append(try compareScalars(element, inner))
            }
            switch comparison.modifier ?? .any {
            case .any: return results.contains(true)
            case .all: return !results.contains(false)
            case .none: return !results.contains(true)
            }
        }
        return try compareScalars(comparison, scope)
    }

    /// `x IN s` where `s` is a string (a constant, an argument or a string key
    /// path), as `s CONTAINS x`; nil when the right side is a list or a to-many key path.
    private func substringTest(_ comparison: Comparison, _ scope: Scope) throws(RPCError) -> Comparison? {
        switch comparison.rhs {
        case .value(.string): break
        case .keyPath(let path):
            guard case .scalar(_, let type, let destination) = try resolve(path, in: scope),
                type == .string || (type == nil && destination == nil)  // nil beyond a nil to-one
            else { return nil }
        default: return nil
        }
        let isString: Bool
        switch comparison.lhs {
        case .value(.string), .value(.null): isString = true
        case .keyPath(let path):
            switch try resolve(path, in: scope) {
            case .scalar(_, let type, let destination):
                isString = type == .string || (type == nil && destination == nil)  // nil beyond a nil to-one
            case .collection: return nil  // ANY/ALL/NONE compare each element.
            }
        default: isString = false
        }
        guard isString else {
            throw .invalidParams(
                "IN with a string on the right is a substring test and needs a string on the left", field: "predicate")
        }
        return Comparison(
            lhs: comparison.rhs, op: .contains, rhs: comparison.lhs, options: comparison.options,
            position: comparison.position)
    }

    private func operand(_ expression: PredicateExpression, _ scope: Scope, type: AttributeType?, destination: String?)
        throws(RPCError) -> (Scalar, AttributeType?, String?)
    {
        switch expression {
        case .keyPath(let path):
            switch try resolve(path, in: scope) {
            case .scalar(let value, let type, let destination): return (value, type, destination)
            case .collection:
                throw .invalidParams("'\(path.joined(separator: "."))' is a to-many relationship", field: "predicate")
            }
        case .value(let value):
            return (normalize(value, type: type, destination: destination), type, destination)
        case .list:
            throw .invalidParams("a list can only follow IN or BETWEEN", field: "predicate")
        case .aggregate(let function, let collection, let key):
            guard case .collection(let objects, let destinationEntity, _) = try resolve(collection, in: scope) else {
                throw .invalidParams("@\(function.rawValue) needs a to-many key path", field: "predicate")
            }
            if function == .count { return (.integer(Int64(objects.count)), .integer, nil) }
            var values: [Scalar] = []
            var valueType: AttributeType?
            for related in objects {
                guard
                    case .scalar(let value, let type, _) = try resolve(
                        key, in: Scope(object: related, entity: destinationEntity, variables: [:]))
                else { continue }
                valueType = type
                if value != .null { values.append(value) }
            }
            func number(_ scalar: Scalar) -> Double {
                switch scalar {
                case .integer(let value): Double(value)
                case .real(let value): value
                default: 0
                }
            }
            switch function {
            case .sum: return (.real(values.reduce(0) { $0 + number($1) }), .double, nil)
            case .avg:
                return (
                    values.isEmpty ? .null : .real(values.reduce(0) { $0 + number($1) } / Double(values.count)),
                    .double, nil
                )
            case .min: return (values.min { ($0.compare($1) ?? 0) < 0 } ?? .null, valueType, nil)
            default: return (values.max { ($0.compare($1) ?? 0) < 0 } ?? .null, valueType, nil)
            }
        case .subqueryCount(let collection, let variable, let predicate):
            guard case .collection(let objects, let destinationEntity, _) = try resolve(collection, in: scope) else {
                throw .invalidParams("SUBQUERY needs a to-many key path", field: "predicate")
            }
            var count: Int64 = 0
            for related in objects {
                var inner = scope
                inner.variables[variable] = (related, destinationEntity)
                if try evaluate(predicate, inner) { count += 1 }
            }
            return (.integer(count), .integer, nil)
        }
    }

    private func fold(_ value: Scalar, _ options: Comparison.Options, type: AttributeType?) -> Scalar {
        guard !options.isEmpty, type == nil || type == .string, case .text(let text) = value else { return value }
        return .text(PredicateText.fold(text, options.rawValue))
    }

    private func compareScalars(_ comparison: Comparison, _ scope: Scope) throws(RPCError) -> Bool {
        let (leftRaw, type, destination) = try operand(comparison.lhs, scope, type: nil, destination: nil)
        let options = comparison.options
        let left = fold(leftRaw, options, type: type)
        if comparison.op == .in || comparison.op == .between {
            guard case .list(let elements) = comparison.rhs else {
                if comparison.op == .in, let substring = try substringTest(comparison, scope) {
                    return try compareScalars(substring, scope)
                }
                throw .invalidParams("\(comparison.op.rawValue) needs a list", field: "predicate")
            }
            var values: [Scalar] = []
            for element in elements {
                values.append(
                    fold(try operand(element, scope, type: type, destination: destination).0, options, type: type))
            }
            if comparison.op == .between {
                guard values.count == 2, let low = left.compare(values[0]), let high = left.compare(values[1]) else {
                    return false
                }
                return low >= 0 && high <= 0
            }
            return values.contains { left.isSame($0) }
        }
        let (rightRaw, rightType, _) = try operand(comparison.rhs, scope, type: type, destination: destination)
        let right = fold(rightRaw, options, type: type ?? rightType)
        switch comparison.op {
        case .equal: return left.isSame(right)
        case .notEqual: return !left.isSame(right)
        case .less: return left.compare(right).map { $0 < 0 } ?? false
        case .lessOrEqual: return left.compare(right).map { $0 <= 0 } ?? false
        case .greater: return left.compare(right).map { $0 > 0 } ?? false
        case .greaterOrEqual: return left.compare(right).map { $0 >= 0 } ?? false
        case .beginsWith:
            guard let text = left.text, let prefix = right.text else { return false }
            return text.utf8.starts(with: prefix.utf8)
        case .endsWith:
            guard let text = left.text, let suffix = right.text else { return false }
            return text.utf8.reversed().starts(with: suffix.utf8.reversed())
        case .contains:
            guard let text = left.text, let part = right.text else { return false }
            return Self.containsBytes(Array(text.utf8), Array(part.utf8))
        case .like:
            guard let text = left.text, let pattern = right.text else { return false }
            return Self.glob(Array(PredicateText.glob(pattern).unicodeScalars)[...], Array(text.unicodeScalars)[...])
        case .matches:
            guard let text = leftRaw.text, let pattern = rightRaw.text else { return false }
            do {
                return try PredicateText.matches(text, pattern, flags: options.rawValue, cache: regexes)
            } catch {
                throw error.rpcError
            }
        case .in, .between: return false
        }
    }

    private static func containsBytes(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty else { return true }
        guard haystack.count >= needle.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<start + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }

    /// SQLite's GLOB over code points: `*`, `?`, and the `[x]` escapes that ``PredicateText/glob(_:)`` writes.
    ///
    /// Greedy, going back only to the last `*` when a later token fails: time
    /// O(pattern × text) whatever the pattern (recursing at every `*` took
    /// exponential time on `'a***…***b'`: found by Fuzz/FuzzPredicate).
    static func glob(_ pattern: ArraySlice<Unicode.Scalar>, _ text: ArraySlice<Unicode.Scalar>) -> Bool {
        let pattern = Array(pattern)
        let text = Array(text)
        var position = 0  // in `pattern`
        var offset = 0  // in `text`
        var resume: (position: Int, offset: Int)?  // after the last `*`, and where its match ends so far
        while offset < text.count {
            if position < pattern.count, pattern[position] == "*" {
                while position < pattern.count, pattern[position] == "*" { position += 1 }
                if position == pattern.count { return true }
                resume = (position, offset)
                continue
            }
            if position < pattern.count, let width = tokenWidth(pattern, at: position, matching: text[offset]) {
                position += width
                offset += 1
                continue
            }
            // Let the last `*` take one more scalar and try again from there.
            guard let last = resume else { return false }
            resume = (last.position, last.offset + 1)
            position = last.position
            offset = last.offset + 1
        }
        while position < pattern.count, pattern[position] == "*" { position += 1 }
        return position == pattern.count
    }

    /// How many pattern scalars the token at `index` spans when it matches `scalar`; `nil` when it does not.
    private static func tokenWidth(_ pattern: [Unicode.Scalar], at index: Int, matching scalar: Unicode.Scalar) -> Int?
    {
        switch pattern[index] {
        case "?":
            return 1
        case "[" where index + 2 < pattern.count && pattern[index + 2] == "]":
            return pattern[index + 1] == scalar ? 3 : nil
        case let literal:
            return literal == scalar ? 1 : nil
        }
    }
}
