import DepotProtocol

/// A request's `prefetch` key paths (DESIGN.md §5, Prefetching) resolved against
/// the model: a tree of relationship hops from the fetched entity, each read for
/// a whole level of objects in one statement.
///
/// The objects along a path carry the relationship the path follows from them:
/// a to-one already does (its id is a column); a to-many is added to the shape
/// of the rows (``rowToManyKeys``) or of the related objects of that entity
/// (``relatedToManyKeys``), so a client can walk the graph it was given.
public struct PrefetchPlan: Sendable, Hashable {
    /// One relationship followed from the objects of a level.
    public struct Hop: Sendable, Hashable {
        /// The relationship's name on ``source``.
        public let relationship: String
        /// The entity the hop starts from.
        public let source: String
        /// The entity it reaches.
        public let destination: String
        /// Whether the relationship is to-many.
        public let toMany: Bool
        /// The hops that go on from the objects this one reaches.
        public internal(set) var next: [Hop]
    }

    /// The hops from the fetched entity's objects (the rows).
    public let hops: [Hop]
    /// The to-many keys the rows carry besides their usual keys.
    public let rowToManyKeys: [String]
    /// The to-many keys each related entity's objects carry besides their usual keys.
    public let relatedToManyKeys: [String: [String]]
    /// The relationship keys (to-one and to-many) the rows must carry.
    public let rowKeys: [String]

    /// Resolves `paths` from `entity`.
    ///
    /// - Throws: -32602 naming `field[i]` for a path that is empty, names a key
    ///   the entity does not have, or goes on from (or ends in) something that
    ///   is not a relationship.
    public init(_ paths: [String], entity: EntitySchema, schema: Schema, field: String) throws(RPCError) {
        var roots: [Hop] = []
        for (index, path) in paths.enumerated() {
            let keys = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            var resolved: [(relationship: RelationshipDescription, source: String)] = []
            var current = entity
            for key in keys {
                // Model keys are ASCII identifiers: other text (which Swift's String equality could fold
                // onto one, as the Kelvin sign onto K) names none of them.
                guard key.utf8.allSatisfy({ $0 < 0x80 }), let relationship = current.toOne[key] ?? current.toMany[key]
                else {
                    let what = current.attributes[key] != nil ? "an attribute, not a relationship" : "not a key"
                    throw .invalidParams(
                        "prefetch key path '\(path)': '\(key)' on \(current.name) is \(what) (relationships: \(current.description.relationships.map(\.name).joined(separator: ", ")))",
                        field: "\(field)[\(index)]")
                }
                guard let destination = schema.entity(named: relationship.destination) else {
                    throw .invalidParams(
                        "prefetch key path '\(path)': '\(key)' leads to \(relationship.destination), which the model does not have",
                        field: "\(field)[\(index)]")
                }
                if relationship.toMany, relationship.inverse == nil {
                    throw .invalidParams(
                        "prefetch key path '\(path)': the to-many '\(key)' on \(current.name) has no inverse to read it by",
                        field: "\(field)[\(index)]")
                }
                resolved.append((relationship, current.name))
                current = destination
            }
            Self.insert(resolved[...], into: &roots)
        }
        hops = roots
        rowToManyKeys = roots.filter(\.toMany).map(\.relationship)
        rowKeys = roots.map(\.relationship)
        var related: [String: [String]] = [:]
        func gather(_ hop: Hop) {
            for next in hop.next {
                if next.toMany,
                    !(related[next.source] ?? []).contains(where: { $0.utf8.elementsEqual(next.relationship.utf8) })
                {
                    related[next.source, default: []].append(next.relationship)
                }
                gather(next)
            }
        }
        roots.forEach(gather)
        relatedToManyKeys = related
    }

    /// Merges one resolved path into the tree (shared prefixes are one hop).
    private static func insert(
        _ path: ArraySlice<(relationship: RelationshipDescription, source: String)>, into hops: inout [Hop]
    ) {
        guard let first = path.first else { return }
        let index: Int
        if let found = hops.firstIndex(where: { $0.relationship.utf8.elementsEqual(first.relationship.name.utf8) }) {
            index = found
        } else {
            hops.append(
                Hop(
                    relationship: first.relationship.name, source: first.source,
                    destination: first.relationship.destination, toMany: first.relationship.toMany, next: []))
            index = hops.count - 1
        }
        insert(path.dropFirst(), into: &hops[index].next)
    }

    /// Every entity a hop reaches, once each.
    public var destinations: Set<String> {
        var names: Set<String> = []
        func visit(_ hop: Hop) {
            names.insert(hop.destination)
            hop.next.forEach(visit)
        }
        hops.forEach(visit)
        return names
    }

    /// Every hop with the key path that reaches it (`homeTeam.coach`), depth first.
    public var hopPaths: [(path: String, hop: Hop)] {
        var out: [(String, Hop)] = []
        func visit(_ hop: Hop, _ prefix: String) {
            let path = prefix.isEmpty ? hop.relationship : prefix + "." + hop.relationship
            out.append((path, hop))
            for next in hop.next { visit(next, path) }
        }
        for hop in hops { visit(hop, "") }
        return out
    }
}
