import DepotProtocol

/// Columns through relationships (`--column homeTeam.teamName`): the values a
/// key path reads from a row and the related objects a prefetch brought
/// (DESIGN.md §5, Prefetching), with no further round trip.
enum RelatedColumns {
    /// The relationship key paths `columns` read through: each dotted column without its last key.
    static func prefetchPaths(for columns: [String]) -> [String] {
        var paths: [String] = []
        for column in columns {
            let keys = column.split(separator: ".", omittingEmptySubsequences: false)
            guard keys.count > 1 else { continue }
            let path = keys.dropLast().joined(separator: ".")
            if !paths.contains(where: { $0.utf8.elementsEqual(path.utf8) }) { paths.append(path) }
        }
        return paths
    }

    /// The value `keyPath` reads from `object`: a to-one id is followed to its
    /// related object, a to-many list to each of its members (an array of values);
    /// an object not in `related` (outside the key's scope) reads as nil.
    static func value(_ keyPath: String, of object: JSONValue, related: [String: JSONValue]) -> JSONValue {
        var values: [JSONValue] = [object]
        var many = false
        for key in keyPath.split(separator: ".", omittingEmptySubsequences: false).map(String.init) {
            var next: [JSONValue] = []
            for value in values {
                switch value {
                case .object(let members):
                    next.append(members[key] ?? .null)
                case .string(let id):
                    next.append(related[id]?[key] ?? .null)
                default:
                    next.append(.null)
                }
            }
            // A to-many list fans out: the following keys read each member.
            values = next.flatMap { value -> [JSONValue] in
                guard case .array(let ids) = value else { return [value] }
                many = true
                return ids
            }
        }
        return many ? .array(values) : values.first ?? .null
    }
}
