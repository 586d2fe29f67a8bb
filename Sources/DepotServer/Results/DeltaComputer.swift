import DepotProtocol
import DepotStore

/// What a committed transaction changes in one result set: the changed rows
/// (and rows reached through relationships) re-evaluated against the set's
/// predicate and sort. Reads the set; never changes it, nor anything else.
///
/// Nothing re-runs the whole query: a set that evaluates in memory
/// (``InMemoryRows``) takes the changed rows' values from the commit itself
/// (``CommittedTransaction/images``), and reads them from a snapshot of the
/// store right after the transaction only when the commit did not carry them;
/// other sets read their candidates with `WHERE id IN (changed)`. Each read is
/// counted by reason (``reads``).
struct DeltaComputer {
    /// The snapshot right after the transaction, if one was taken (none when no set needs to read).
    private let snapshot: Store?
    /// The model the transaction committed under.
    let schema: Schema
    /// The transaction's changed rows, by entity.
    let changedRows: [String: Set<Int64>]
    /// The keys each updated row changed, by entity.
    let touchedKeys: [String: [Int64: Set<String>]]
    /// The changed rows, read once for every set that evaluates in memory.
    private(set) var memory: InMemoryRows
    /// The store reads made so far, by reason (the changed rows' reads are ``memory``'s).
    private var counted = ServerStats.StoreReads()

    /// The store reads made so far, by reason.
    var reads: ServerStats.StoreReads {
        var reads = counted
        reads.changedRows += Int64(memory.reads)
        return reads
    }

    /// A computer for `transaction`, reading `store` (the snapshot right after it) where its images are not enough.
    init(_ transaction: CommittedTransaction, store: Store?, schema: Schema) {
        snapshot = store
        self.schema = store?.schema ?? schema
        changedRows = transaction.changes.mapValues { Set($0.allRows) }
        touchedKeys = transaction.changes.mapValues { changes in
            Dictionary(changes.updated.map { ($0.row, $0.keys) }, uniquingKeysWith: { $0.union($1) })
        }
        memory = InMemoryRows(
            store: store, schema: self.schema, changedRows: changedRows, images: transaction.images)
    }

    /// The snapshot to read, or why there is none.
    var store: Store {
        get throws(RPCError) {
            guard let snapshot else { throw RPCError.internalError("no snapshot was taken for the commit") }
            return snapshot
        }
    }

    /// The changed rows of `entity` that still exist, or `nil` when they cannot be read.
    mutating func rows(of entity: String) -> [Int64: EvaluationRow]? {
        guard let schema = schema.entity(named: entity) else { return nil }
        return try? memory.rows(of: schema)
    }

    /// Whether the values of `entity`'s changed rows came with the commit.
    func hasImages(of entity: String) -> Bool { memory.images[entity] != nil }

    /// The rows whose membership or position in `set` may change, each with
    /// its new sort key, or `nil` where it no longer matches; `only` narrows
    /// the candidates to rows already known to matter (the equality filing).
    mutating func changes(for set: ResultSet, only: Set<Int64>? = nil) throws(RPCError) -> [Int64: SortKey?] {
        // Per set, for every set a commit reaches: the entity's schema is not copied and its
        // name is hashed once, until a set needs either.
        let name = set.plan.entity.name
        var candidates: Set<Int64>
        if let only {
            candidates = only
        } else if set.dependencies.isEmpty {
            candidates = changedRows[name] ?? []
        } else {
            candidates = try Self.candidateRows(
                entity: set.plan.entity, dependencies: set.dependencies, changedRows: changedRows, store: snapshot,
                reads: &counted)
        }
        if let keys = set.inMemory?.predicateKeys, let touched = touchedKeys[name] {
            // A row it does not hold, updated in keys its predicate does not read, still does not match
            // (unless the set holds a prefix of its results: the row may match beyond the held rows).
            func mayChange(_ id: Int64) -> Bool {
                guard let changed = touched[id], !changed.isEmpty, changed.isDisjoint(with: keys) else { return true }
                return set.index.contains(id) || set.truncated
            }
            // Most sets a commit reaches keep none or all of its rows: one look at each, no new set for those.
            var unchanged = 0
            for id in candidates where !mayChange(id) { unchanged += 1 }
            if unchanged == candidates.count { return [:] }
            if unchanged > 0 { candidates = candidates.filter(mayChange) }
        }
        guard !candidates.isEmpty else { return [:] }
        let evaluated: [Int64: SortKey]
        if let inMemory = set.inMemory {
            evaluated = try memory.evaluate(inMemory, entity: set.plan.entity, rows: candidates)
        } else {
            counted.count(set.dependencies.isEmpty ? .changedRows : .relationship)
            evaluated = try store.keyedRows(set.plan, among: Array(candidates))
        }
        return Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) })
    }

    /// The rows of a grouped set's entity whose group or contribution the transaction may change.
    mutating func candidates(for set: ResultSet) throws(RPCError) -> Set<Int64> {
        try Self.candidateRows(
            entity: set.plan.entity, dependencies: set.dependencies, changedRows: changedRows, store: snapshot,
            reads: &counted)
    }

    /// Those of `candidates` that match grouped `set` now, with the values its groups read of them.
    mutating func groupMembers(_ candidates: Set<Int64>, of set: ResultSet, grouped: GroupedResults)
        throws(RPCError) -> [Int64: [SortValue]]
    {
        guard !candidates.isEmpty else { return [:] }
        if let members = set.definition?.membersInMemory {
            // The values the groups read, in ``GroupedFetchPlan/memberKeyPaths`` order, as the sort's.
            return try memory.evaluate(members, entity: set.plan.entity, rows: candidates).mapValues(\.values)
        }
        counted.count(.changedRows)
        return try store.groupMembers(grouped.plan, among: Array(candidates))
    }

    /// The changed rows of `entity` that still exist, read once.
    mutating func changedRows(of entity: EntitySchema) throws(RPCError) -> [Int64: EvaluationRow] {
        try memory.rows(of: entity)
    }

    /// Whether the transaction may have changed which objects links reach through `entities`: it
    /// inserted or deleted one of their rows, or updated a key of one that is not an attribute
    /// (a relationship, or keys not recorded).
    func mayChangeLinks(among entities: Set<String>) -> Bool {
        entities.contains { name in
            guard let rows = changedRows[name], !rows.isEmpty else { return false }
            guard let entity = schema.entity(named: name) else { return true }
            let updated = touchedKeys[name] ?? [:]
            return rows.contains { row in
                guard let keys = updated[row], !keys.isEmpty else { return true }
                return keys.contains { entity.attributes[$0] == nil }
            }
        }
    }

    /// The keys each updated row of `entity` changed.
    func touched(_ entity: String) -> [Int64: Set<String>] { touchedKeys[entity] ?? [:] }

    /// Brings `set`, read at an older transaction, up to the transaction `store`
    /// reads (from history, or by reading it again when history no longer reaches back).
    static func catchUp(_ set: ResultSet, store: Store) throws(RPCError) {
        guard let changes = try store.changedRows(since: set.transaction) else {
            try set.read(from: store)
            return
        }
        if !changes.rows.isEmpty {
            // A subscribe's catch-up, not a commit's publishing: its reads are not counted.
            var uncounted = ServerStats.StoreReads()
            let candidates = try candidateRows(
                entity: set.plan.entity, dependencies: set.dependencies, changedRows: changes.rows, store: store,
                reads: &uncounted)
            if let grouped = set.grouped {
                // Not announced yet: no subscriber saw the set, so what it applies needs no delta.
                let read = try store.groupMembers(grouped.plan, among: Array(candidates))
                let (groups, touched) = try grouped.apply(read, candidates: candidates)
                _ = try set.apply(groups, touched: touched)
                grouped.forgetRetired()
                set.transaction = changes.latest
                return
            }
            let evaluated = try store.keyedRows(set.plan, among: Array(candidates))
            _ = try set.apply(
                Dictionary(uniqueKeysWithValues: candidates.map { ($0, evaluated[$0]) }), touched: [:],
                refill: { () throws(RPCError) -> [KeyedRow] in try set.firstRows(in: store) })
        }
        set.transaction = changes.latest
    }

    /// The rows of `entity` whose membership or position the change may affect.
    static func candidateRows(
        entity: EntitySchema, dependencies: [ResultSet.Dependency], changedRows: [String: Set<Int64>], store: Store?,
        reads: inout ServerStats.StoreReads
    ) throws(RPCError) -> Set<Int64> {
        var candidates = changedRows[entity.name] ?? []
        for dependency in dependencies {
            guard let changed = changedRows[dependency.entity], !changed.isEmpty else { continue }
            guard let store else { throw RPCError.internalError("no snapshot was taken for the commit") }
            reads.count(.relationship)
            switch dependency {
            case .path(_, let path):
                candidates.formUnion(try store.rows(of: entity, reaching: Array(changed), through: path))
            case .owner(let name, let inverse):
                guard let destination = store.schema.entity(named: name) else { continue }
                candidates.formUnion(try store.owners(of: Array(changed), in: destination, through: inverse))
            case .joined(_, let relationship):
                candidates.formUnion(try store.rows(of: entity, holding: Array(changed), through: relationship))
            case .any:
                // Every row now in the table; rows that left it were deleted, so they are in `changedRows`.
                candidates.formUnion(try store.allRows(of: entity))
            }
        }
        return candidates
    }
}

/// The changed rows of one transaction, read once per entity for every set
/// that evaluates in memory (``InMemoryFollow``).
struct InMemoryRows {
    /// The snapshot to read the rows the commit did not carry from, if one was taken.
    let store: Store?
    let schema: Schema
    let changedRows: [String: Set<Int64>]
    /// The changed rows' values the commit carried, by entity.
    let images: [String: [Int64: EvaluationRow]]
    private var rows: [String: [Int64: EvaluationRow]] = [:]
    private var evaluator: PredicateEvaluator?
    /// How many reads of the store it made.
    private(set) var reads = 0

    init(store: Store?, schema: Schema, changedRows: [String: Set<Int64>], images: [String: [Int64: EvaluationRow]]) {
        self.store = store
        self.schema = schema
        self.changedRows = changedRows
        self.images = images
    }

    /// The changed rows of `entity` that still exist, read once.
    mutating func rows(of entity: EntitySchema) throws(RPCError) -> [Int64: EvaluationRow] {
        if let read = rows[entity.name] ?? images[entity.name] { return read }
        guard let store else { throw RPCError.internalError("no snapshot was taken for the commit") }
        reads += 1
        let read = try store.evaluationRows(of: entity, ids: Array(changedRows[entity.name] ?? []).sorted())
        rows[entity.name] = read
        return read
    }

    /// The sort keys of the `rows` of `entity` that match, evaluated without a query per set.
    mutating func evaluate(_ follow: InMemoryFollow, entity: EntitySchema, rows candidates: Set<Int64>) throws(RPCError)
        -> [Int64: SortKey]
    {
        let read = try rows(of: entity)
        // Relationships are never followed here: such requests are not evaluated in memory.
        let evaluator =
            self.evaluator
            ?? PredicateEvaluator(model: schema.descriptions, object: { _ in nil }, toMany: { _, _ in [] })
        self.evaluator = evaluator
        var result: [Int64: SortKey] = [:]
        for id in candidates {
            guard let row = read[id] else { continue }
            if let key = try follow.evaluate(row, id: id, entity: entity.name, evaluator: evaluator) {
                result[id] = key
            }
        }
        return result
    }
}
