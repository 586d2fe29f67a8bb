import DepotProtocol

/// Random grouped fetch requests over the predicate fixture's Team, and how to
/// compare two answers (doubles within 1e-9 relative), for the grouped
/// differential tests (DESIGN.md §5, Grouped fetches).
extension PredicateFixture {
    /// Team's group keys: attributes of every kind, and a to-one key path.
    public static let groupKeys = ["zone", "active", "wins", "rating", "founded", "country.name", "teamName"]

    /// A random grouped request over Team (at least one groupBy key or aggregate).
    public static func randomGroupedRequest(_ random: inout SeededGenerator) -> FetchRequest {
        func pick<T>(_ values: [T]) -> T { values.randomElement(using: &random)! }
        func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
        var groupBy: [String] = []
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            let key = pick(groupKeys)
            if !groupBy.contains(key) { groupBy.append(key) }
        }
        // (function, key, type of the value) — the key types the aggregates accept.
        let candidates: [(AggregateFunction, String?, String)] = [
            (.count, nil, "integer"), (.count, "wins", "integer"), (.count, "founded", "integer"),
            (.sum, "wins", "integer"), (.sum, "rating", "double"), (.avg, "wins", "double"),
            (.avg, "rating", "double"), (.min, "wins", "integer"), (.max, "wins", "integer"),
            (.min, "rating", "double"), (.max, "rating", "double"), (.min, "founded", "date"),
            (.max, "founded", "date"), (.min, "teamName", "string"), (.max, "zone", "string"),
            (.max, "country.name", "string"), (.min, "active", "boolean"),
        ]
        var aggregates: [ExpressionDescription] = []
        var types: [String: String] = [:]
        for index in 0..<Int.random(in: groupBy.isEmpty ? 1...3 : 0...3, using: &random) {
            let (function, key, type) = pick(candidates)
            aggregates.append(ExpressionDescription(name: "a\(index)", function: function, key: key))
            types["a\(index)"] = type
        }
        let keyTypes = [
            "zone": "string", "active": "boolean", "wins": "integer", "rating": "double", "founded": "date",
            "country.name": "string", "teamName": "string",
        ]
        for key in groupBy { types[key] = keyTypes[key] }
        let names = groupBy + aggregates.map(\.name)
        func condition() -> String {
            let name = pick(names)
            switch types[name] {
            case "integer": return "\(name) \(pick([">", "<=", "==", "!="])) \(pick(["0", "1", "3", "5", "nil"]))"
            case "double": return "\(name) \(pick([">", "<", ">=", "!="])) \(pick(["0", "1.5", "-1", "2.25", "nil"]))"
            case "date":
                return
                    "\(name) \(pick([">", "<", "==", "!="])) \(pick(["'1990-01-01T00:00:00Z'", "'2001-01-01'", "nil"]))"
            case "boolean": return "\(name) == \(pick(["YES", "NO"]))"
            default:
                return
                    "\(name) \(pick(["BEGINSWITH[cd]", "CONTAINS", "==", "!=", "<"])) \(pick(["'e'", "'Eu'", "'日本'", "nil", "'Z'"]))"
            }
        }
        var having: String?
        if chance(40) {
            having = chance(30) ? "\(condition()) \(pick(["AND", "OR"])) \(condition())" : condition()
        }
        var sort: [SortDescriptor] = []
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            sort.append(SortDescriptor(key: pick(names), ascending: chance(50)))
        }
        return FetchRequest(
            entity: "Team", predicate: chance(50) ? randomPredicate(depth: 1, &random) : nil,
            sort: sort.isEmpty ? nil : sort, limit: chance(30) ? Int.random(in: 0...5, using: &random) : nil,
            offset: chance(30) ? Int.random(in: 0...4, using: &random) : nil, groupBy: groupBy.isEmpty ? nil : groupBy,
            aggregates: aggregates.isEmpty ? nil : aggregates, having: having)
    }

    /// Where two lists of group dictionaries differ (numbers compared by value,
    /// doubles within 1e-9 relative), or nil when they agree.
    public static func groupsDisagreement(_ left: [JSONValue], _ right: [JSONValue]) -> String? {
        guard left.count == right.count else { return "\(left.count) groups against \(right.count)" }
        for (index, (a, b)) in zip(left, right).enumerated() {
            guard let first = a.objectValue, let second = b.objectValue, Set(first.keys) == Set(second.keys) else {
                return "group \(index): \(a) against \(b)"
            }
            for (key, value) in first where !sameValue(value, second[key] ?? .null) {
                return "group \(index), \(key): \(value) against \(second[key] ?? .null)"
            }
        }
        return nil
    }

    /// Equal values, numbers by value, doubles within 1e-9 relative.
    public static func sameValue(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.int(let x), .int(let y)): return x == y
        case (.int, .double), (.double, .int), (.double, .double):
            let x = a.doubleValue ?? 0
            let y = b.doubleValue ?? 0
            return x == y || abs(x - y) <= 1e-9 * max(abs(x), abs(y))
        default: return a == b
        }
    }
}
