import DepotProtocol

/// Which rows of each entity a read may see (DESIGN.md §2, Row-level scopes):
/// every read of the store takes one, so a read that forgets its key's scope
/// does not compile. ``unrestricted`` is written out where a read is meant to
/// see every row (the daemon's own reads, unscoped keys, admin methods).
///
/// Never on the wire: the daemon binds it from the key's policy role; a
/// request's predicate is joined to it as `predicate AND scope`.
public struct ReadScope: Sendable, Hashable {
    /// The bound read predicate of each scoped entity; an entity not listed is unrestricted.
    public var rules: [String: PredicateNode]

    /// A scope of `rules`; a `TRUEPREDICATE` rule is left out (unrestricted).
    public init(rules: [String: PredicateNode]) {
        self.rules = rules.filter { $0.value != .constant(true) }
    }

    /// Every row of every entity.
    public static let unrestricted = ReadScope(rules: [:])

    /// Whether no entity is restricted.
    public var isUnrestricted: Bool { rules.isEmpty }

    /// The read predicate of `entity`, `nil` when it is unrestricted.
    public func predicate(for entity: String) -> PredicateNode? { rules[entity] }

    /// Whether the key can see no object of `entity` at all: the entity does not exist for it.
    public func hides(_ entity: String) -> Bool { rules[entity] == .constant(false) }

    /// Only `entity`'s rows that match `predicate` and this scope (a store-side narrowing,
    /// such as the ids a scoped observer is asked about).
    public func narrowed(_ entity: String, to predicate: PredicateNode) -> ReadScope {
        var narrowed = self
        narrowed.rules[entity] = rules[entity].map { .and([$0, predicate]) } ?? predicate
        return narrowed
    }
}

extension Schema {
    /// The model as a key reading in `scope` sees it (DESIGN.md §2): the relationships to an
    /// entity it cannot read (`FALSEPREDICATE`) do not exist, so requests cannot name them and
    /// objects do not carry them. The hidden entities stay (a request of one reads no row; the
    /// server answers a key naming one as it answers an unknown entity). `self` when the scope
    /// hides nothing.
    public func visible(to scope: ReadScope) -> Schema {
        guard !scope.isUnrestricted, entities.contains(where: { scope.hides($0.name) }) else { return self }
        let kept = entities.map { entity in
            var description = entity.description
            description.relationships.removeAll { scope.hides($0.destination) }
            return EntitySchema(description)
        }
        return Schema(version: version, entities: kept)
    }

    /// ``visible(to:)`` for the read rules of a scope (`nil`: unrestricted).
    func visible(to rules: [String: PredicateNode]?) -> Schema {
        guard let rules else { return self }
        return visible(to: ReadScope(rules: rules))
    }
}
