import DepotProtocol
import DepotStore

/// A `results/subscribe` request checked against the model: its plan, its
/// sharing key, and the entities whose changes can reach it.
struct ResultsDefinition: Sendable {
    let plan: FetchPlan
    /// The sharing key, compared by bytes: requests that differ only in the spelling of some text
    /// (an argument, a `$keyName` in the scope) are different requests (DESIGN.md §4).
    let key: ByteString
    let sectioned: Bool
    let dependencies: [ResultSet.Dependency]
    /// `coalesceMs` when positive: subscriptions coalescing alike share a set, others do not.
    let coalesceMilliseconds: Int?
    /// How to follow a transaction without asking the database per set, when
    /// the request reads only the entity's own keys (``InMemoryFollow``).
    let inMemory: InMemoryFollow?
    /// How a grouped result reads a changed object's membership and the values its groups read
    /// (``GroupedFetchPlan/memberKeyPaths``, as the sort) from the object's own values, when they
    /// are all the entity's own keys: its commits then follow from their row images.
    let membersInMemory: InMemoryFollow?
    /// The grouped request of a live grouped result (DESIGN.md §7), whose rows
    /// are groups; ``plan`` then reads the objects that the predicate lets into them.
    let grouped: GroupedFetchPlan?
    /// The subscribe's parameters (the effective request), to check again after a migration.
    let params: ResultsSubscribe.Parameters
    /// The subscribing key's read scope, to define the request again after a migration.
    let scope: ReadScope
    /// The model the request was checked against.
    let schema: Schema

    /// The definition of `params` read in `scope` (the subscribing key's; ``StoreView/resultsDefinition(_:)``).
    init(_ params: ResultsSubscribe.Parameters, scope: ReadScope, schema: Schema) throws(RPCError) {
        self.params = params
        self.scope = scope
        // What the key cannot read does not exist for it, relationships to it included.
        let schema = schema.visible(to: scope)
        self.schema = schema
        let request = params.request
        let scopePredicate = scope.predicate(for: request.entity)
        if let coalesce = params.coalesceMs, coalesce < 0 {
            throw .invalidParams("coalesceMs must not be negative, got \(coalesce)", field: "params.coalesceMs")
        }
        coalesceMilliseconds = (params.coalesceMs ?? 0) > 0 ? params.coalesceMs : nil
        key = Self.sharingKey(
            params, scope: scopePredicate, readScope: scope, coalesceMilliseconds: coalesceMilliseconds)
        guard !request.isGrouped else {
            if request.prefetch != nil {
                throw .invalidParams(
                    "a grouped request's rows are groups, which have no relationships to prefetch",
                    field: "params.request.prefetch")
            }
            let grouped = try Self.groupedPlan(params, scope: scope, schema: schema)
            self.grouped = grouped
            sectioned = params.sectionKeyPath != nil
            inMemory = nil
            // The objects the predicate (and the key's scope) lets into the groups (the predicate's
            // share of `arguments`).
            let members = DepotProtocol.FetchRequest(
                entity: request.entity, predicate: request.predicate, arguments: grouped.shape.predicateArguments)
            plan = try FetchPlan(members, scope: scope, schema: schema, field: "params.request")
            dependencies = try Self.dependencies(
                keyPaths: grouped.memberKeyPaths, predicate: request.predicate,
                arguments: grouped.shape.predicateArguments, scope: scopePredicate, entity: plan.entity,
                schema: schema)
            // Key names compare by their bytes, as the model looks them up.
            let ownKeys = plan.entity.columnKeys
            let allOwn = grouped.memberKeyPaths.allSatisfy { key in ownKeys.contains { $0.bytesEqual(key) } }
            membersInMemory =
                !grouped.memberKeyPaths.isEmpty && allOwn
                ? InMemoryFollow(
                    request: members, scope: scopePredicate,
                    sort: grouped.memberKeyPaths.map { SortDescriptor(key: $0) },
                    entity: plan.entity, dependencies: dependencies) : nil
            return
        }
        grouped = nil
        membersInMemory = nil
        guard let sort = request.sort, !sort.isEmpty else {
            throw .invalidParams(
                "fetched results need request.sort: the order is what the deltas' index paths refer to",
                field: "params.request.sort")
        }
        if let type = request.resultType, type != .objects {
            throw .invalidParams(
                "results/subscribe returns objects; resultType '\(type.rawValue)' is not supported",
                field: "params.request.resultType")
        }
        if let sectionKeyPath = params.sectionKeyPath, sectionKeyPath != sort[0].key {
            throw .invalidParams(
                "sectionKeyPath '\(sectionKeyPath)' must order like the first sort key '\(sort[0].key)' (as NSFetchedResultsController requires): sort by it first",
                field: "params.sectionKeyPath")
        }
        plan = try FetchPlan(request, scope: scope, schema: schema, field: "params.request")
        sectioned = params.sectionKeyPath != nil
        let dependencies = try Self.dependencies(
            keyPaths: sort.map(\.key), predicate: request.predicate, arguments: request.arguments,
            scope: scopePredicate, entity: plan.entity, schema: schema)
        self.dependencies = dependencies
        inMemory = InMemoryFollow(
            request: request, scope: scopePredicate, sort: sort, entity: plan.entity, dependencies: dependencies)
    }

    /// Whether the request names something `migration` renamed: its entity, or a key its
    /// sort, properties, groupBy, aggregates or section key path start with (a predicate
    /// naming a renamed key no longer compiles against the new model).
    func names(renamedIn migration: ModelMigration) -> Bool {
        let request = params.request
        if migration.renamedEntities[request.entity] != nil { return true }
        guard let renamed = migration.renamedKeys[request.entity] else { return false }
        var keyPaths = (request.sort ?? []).map(\.key) + (request.properties ?? []) + (request.groupBy ?? [])
        keyPaths += (request.aggregates ?? []).compactMap(\.key)
        if let section = params.sectionKeyPath { keyPaths.append(section) }
        return keyPaths.contains { path in
            path.split(separator: ".").first.map { renamed[String($0)] != nil } ?? false
        }
    }

    /// What makes two subscriptions share a set: the request without its
    /// delivery options, the section key path and the coalescing window.
    private static func sharingKey(
        _ params: ResultsSubscribe.Parameters, scope: PredicateNode?, readScope: ReadScope,
        coalesceMilliseconds: Int?
    ) -> ByteString {
        var canonical = params.request
        canonical.batchSize = nil
        canonical.workDoneToken = nil
        canonical.partialResultToken = nil
        canonical.countFirst = nil
        let section = JSONValue.string(params.sectionKeyPath ?? "")
        let text = String(
            decoding: JSONWriter.encode([
                "request": (try? JSONCoding.encode(canonical)) ?? .null, "section": section,
                "coalesceMs": .int(Int64(coalesceMilliseconds ?? 0)),
                // Identical effective requests (request AND scope) share one set.
                "scope": scope.map { .string(String(reflecting: $0)) } ?? .null,
                // With prefetch, the related entities' read scopes decide what the set delivers too.
                "prefetchScopes": params.request.prefetch == nil
                    ? .null
                    : .string(
                        String(
                            reflecting: readScope.rules.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) })),
            ]),
            as: UTF8.self)
        return ByteString(text)
    }

    /// A grouped subscribe checked: the grouped plan, with `sectionKeyPath`
    /// naming a groupBy key that is the first sort key, and no cache.
    private static func groupedPlan(_ params: ResultsSubscribe.Parameters, scope: ReadScope, schema: Schema)
        throws(RPCError) -> GroupedFetchPlan
    {
        let request = params.request
        if request.resultType == .count {
            throw .invalidParams(
                "results/subscribe to a grouped request returns its groups as dictionaries; resultType 'count' is not supported",
                field: "params.request.resultType")
        }
        let grouped = try GroupedFetchPlan(request, scope: scope, schema: schema, field: "params.request")
        // Each live group row carries its `id`: no aggregate may take that name.
        if let index = request.aggregates?.firstIndex(where: { $0.name == "id" }) {
            throw .invalidParams(
                "aggregate name 'id' is taken in live grouped results: each group row carries its id under it",
                field: "params.request.aggregates[\(index)].name")
        }
        if let sectionKeyPath = params.sectionKeyPath {
            guard grouped.shape.groupKeys.contains(where: { $0.name == sectionKeyPath }) else {
                throw .invalidParams(
                    "sectionKeyPath '\(sectionKeyPath)' of a grouped subscription must be one of its groupBy keys (\(grouped.shape.groupKeys.map(\.name).joined(separator: ", ")))",
                    field: "params.sectionKeyPath")
            }
            guard let first = request.sort?.first, first.key == sectionKeyPath else {
                throw .invalidParams(
                    "sectionKeyPath '\(sectionKeyPath)' must order like the first sort key (as NSFetchedResultsController requires): sort by it first",
                    field: "params.sectionKeyPath")
            }
        }
        if params.cacheName != nil {
            throw .invalidParams(
                "a grouped subscription keeps no cache (its groups are rebuilt on subscribe): leave cacheName out",
                field: "params.cacheName")
        }
        return grouped
    }

    /// How changes reach a set whose objects are read through `keyPaths` (sort
    /// keys, or groupBy and aggregate keys) and filtered by `predicate`.
    private static func dependencies(
        keyPaths: [String], predicate: String?, arguments: JSONValue?, scope: PredicateNode?, entity: EntitySchema,
        schema: Schema
    ) throws(RPCError) -> [ResultSet.Dependency] {
        var dependencies: [ResultSet.Dependency] = []
        // Key paths through to-one relationships.
        for keyPath in keyPaths {
            let parts = keyPath.split(separator: ".").map(String.init)
            var current = entity
            for depth in 0..<max(0, parts.count - 1) {
                guard let relationship = current.toOne[parts[depth]],
                    let next = schema.entity(named: relationship.destination)
                else { break }
                dependencies.append(.path(entity: next.name, path: Array(parts[0...depth])))
                current = next
            }
        }
        // Predicates that cross relationships, as the compiler reports them.
        let compiled = try PredicateCompilation.compile(
            predicate: predicate, arguments: arguments, scope: scope, entity: entity, schema: schema)
        for dependency in compiled.dependencies {
            switch dependency {
            case .toOne(let name, let path): dependencies.append(.path(entity: name, path: path))
            case .toMany(let name, let inverse): dependencies.append(.owner(entity: name, inverse: inverse))
            case .joined(let name, let relationship):
                dependencies.append(.joined(entity: name, relationship: relationship))
            case .any(let name): dependencies.append(.any(entity: name))
            }
        }
        return dependencies
    }
}

/// A result set's predicate and sort, ready to be evaluated on a changed row
/// held in memory: the committed values are in hand (one read per entity and
/// transaction), and the in-memory evaluator agrees with the SQL the store
/// runs (the predicate table and the differential test check both), so a save
/// pays for the sets of its entity without one query each.
///
/// Only for requests that read the entity's own keys: no relationship in the
/// predicate or the sort (those follow through SQL, targeted by their dependencies).
struct InMemoryFollow: Sendable {
    let predicate: PredicateNode?
    /// The sort descriptors' keys, in order (`id`/`SELF` is the row).
    let sortKeys: [String]
    /// `key == constant` that every match satisfies (the predicate or one of
    /// its top-level AND terms), on a string or integer attribute: the engine
    /// files the set under it, so that a changed row reaches only the sets of
    /// its own value (and those that held it).
    let equality: (key: String, value: JSONValue)?
    /// The keys the predicate reads: a row outside the set whose update changed
    /// none of them still does not match, and needs no evaluation.
    let predicateKeys: Set<String>

    init?(
        request: FetchRequest, scope: PredicateNode?, sort: [SortDescriptor], entity: EntitySchema,
        dependencies: [ResultSet.Dependency]
    ) {
        guard dependencies.isEmpty else { return nil }
        let plainKeys = Set(entity.columnKeys).union(["id", "SELF", "self"])
        guard sort.allSatisfy({ plainKeys.contains($0.key) }) else { return nil }
        // The request's predicate AND the key's scope: a row leaving the scope leaves the set. No
        // predicate (`nil`) matches every row: `try?` would flatten it into "cannot follow in memory".
        do {
            predicate = try PredicateCompilation.combined(
                predicate: request.predicate, arguments: request.arguments, scope: scope)
        } catch {
            return nil
        }
        sortKeys = sort.map(\.key)
        equality = predicate.flatMap { Self.equality(in: $0, entity: entity) }
        var keys = Set<String>()
        predicate.map { Self.collectKeys(of: $0, into: &keys) }
        predicateKeys = keys
    }

    /// The first key of every key path `node` reads (no relationships are followed here).
    private static func collectKeys(of node: PredicateNode, into keys: inout Set<String>) {
        switch node {
        case .constant: break
        case .not(let inner): collectKeys(of: inner, into: &keys)
        case .and(let terms), .or(let terms): for term in terms { collectKeys(of: term, into: &keys) }
        case .comparison(let comparison):
            for side in [comparison.lhs, comparison.rhs] { collectKeys(of: side, into: &keys) }
        }
    }

    private static func collectKeys(of expression: PredicateExpression, into keys: inout Set<String>) {
        switch expression {
        case .keyPath(let path): if let first = path.first { keys.insert(first) }
        case .value: break
        case .list(let elements): for element in elements { collectKeys(of: element, into: &keys) }
        case .aggregate(_, let collection, _): if let first = collection.first { keys.insert(first) }
        case .subqueryCount(let collection, _, _): if let first = collection.first { keys.insert(first) }
        }
    }

    /// The first `key == constant` an object must satisfy to match `node`, when it can be filed by value.
    private static func equality(in node: PredicateNode, entity: EntitySchema) -> (key: String, value: JSONValue)? {
        switch node {
        case .and(let terms):
            for term in terms { if let found = equality(in: term, entity: entity) { return found } }
            return nil
        case .comparison(let comparison):
            guard comparison.modifier == nil, comparison.op == .equal, comparison.options.isEmpty else { return nil }
            let sides: (PredicateExpression, PredicateExpression) = (comparison.lhs, comparison.rhs)
            let pair: (String, JSONValue)
            switch sides {
            case (.keyPath(let path), .value(let value)), (.value(let value), .keyPath(let path)):
                guard path.count == 1 else { return nil }
                pair = (path[0], value)
            default: return nil
            }
            // Only values whose equality is their wire form's: exact strings and integers.
            switch (entity.attributes[pair.0]?.type, pair.1) {
            case (.string?, .string), (.integer?, .int): return (pair.0, pair.1)
            default: return nil
            }
        default:
            return nil
        }
    }

    /// The row's sort key when it matches, else `nil`.
    func evaluate(_ row: EvaluationRow, id: Int64, entity: String, evaluator: PredicateEvaluator) throws(RPCError)
        -> SortKey?
    {
        if let predicate, try !evaluator.evaluate(predicate, on: row.object, entity: entity) { return nil }
        return SortKey(
            values: sortKeys.map { key in
                ["id", "SELF", "self"].contains(key) ? .integer(id) : row.sortValues[key] ?? .null
            })
    }
}
