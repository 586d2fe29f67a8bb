import DepotProtocol
import DepotStore
import Synchronization

/// What one `store/observe` registration of a scoped key may hear of
/// (DESIGN.md §2, Row-level scopes): only objects in its read scope, and an
/// object that leaves the scope (updated out of it, or deleted) is reported to
/// the observer that could see it before.
///
/// It keeps, per entity with a read scope, the rows in scope as of the last
/// transaction it published (its *baseline*). Each transaction's inserted and
/// updated rows are checked against the scope in the store as the transaction
/// left it; what was in scope before is the baseline. So for the key:
/// - an insert in scope, or an update into the scope, is an `insert`;
/// - an update in scope before and after is an `update`;
/// - a delete, or an update out of the scope, of a row in scope before is a `delete`;
/// - anything else is not reported.
///
/// Touched only from jobs of the publish lane (its start and each publish), in
/// commit order; the lock only makes that safe to state.
final class ScopedObservation: Sendable {
    private struct State {
        /// The key's scope; replaced when a reload changes it.
        var scope: KeyScope
        /// The rows in scope per scoped entity; `nil` until the baseline was read.
        var visible: [String: Set<Int64>]?
        /// The read rules that evaluate in memory on a row's own keys, by entity (others are read with SQL).
        var inMemory: [String: InMemoryFollow] = [:]
    }

    /// The entities observed (`nil`: all).
    private let entities: Set<String>?
    private let state: Mutex<State>

    /// An observation of `entities` (all when `nil`) through `scope`; it reports nothing until ``start(scope:store:)``.
    init(scope: KeyScope, entities: [String]?) {
        self.entities = entities.map(Set.init)
        state = Mutex(State(scope: scope, visible: nil))
    }

    /// Reads the baseline: the rows of each observed entity with a read scope
    /// that are in `scope` in `store` (a snapshot in commit order). Called in
    /// the publish lane, again when a reload changes the key's scope.
    ///
    /// - Returns: the equality term of each observed entity, to file the
    ///   observer by (``ObserverFiling``); `nil` when it cannot be filed (it
    ///   observes every entity, or one without an equality rule).
    @discardableResult
    func start(scope: KeyScope, store: Store) throws(RPCError) -> [String: ObserverFiling.Term]? {
        var visible: [String: Set<Int64>] = [:]
        var inMemory: [String: InMemoryFollow] = [:]
        for name in scopedEntities(of: scope, schema: store.schema) {
            guard let read = scope.read(name) else { continue }
            if read == .constant(false) {
                visible[name] = []
                continue
            }
            let request = FetchRequest(entity: name, resultType: .ids)
            visible[name] = Set(
                try store.fetch(request, scope: ReadScope(rules: [name: read])).ids?.compactMap { ObjectID($0)?.row }
                    ?? [])
            // A rule on the entity's own keys is evaluated in memory on the touched rows, as the
            // results engine does; one that follows a relationship is read through SQL.
            if let entity = store.schema.entity(named: name),
                let compiled = try? PredicateCompilation.compile(node: read, entity: entity, schema: store.schema),
                compiled.dependencies.isEmpty
            {
                inMemory[name] = InMemoryFollow(
                    request: FetchRequest(entity: name), scope: read, sort: [], entity: entity, dependencies: [])
            }
        }
        state.withLock { $0 = State(scope: scope, visible: visible, inMemory: inMemory) }
        guard let entities else { return nil }
        var terms: [String: ObserverFiling.Term] = [:]
        for name in entities {
            if scope.read(name) == .constant(false) { continue }
            guard scope.read(name) != nil, let equality = inMemory[name]?.equality else { return nil }
            terms[name] = equality
        }
        return terms
    }

    /// What the observers found of one transaction's rows, shared among them:
    /// the rows read once per entity for rules that evaluate in memory, and
    /// what each other rule matched (one SQL read per entity and rule).
    struct Checks {
        /// The touched rows' values, read once per entity.
        var rows: InMemoryRows
        /// The rows each rule matched, by entity and rule.
        var found: [Check: Set<Int64>] = [:]
        /// How many rules were checked with a read of the store (rules that follow a relationship).
        var sqlReads = 0

        /// Checks of `transaction`'s inserted and updated rows, from the values it carries
        /// (its row images) or else read from `store`, under `schema`.
        init(_ transaction: CommittedTransaction, store: Store?, schema: Schema) {
            rows = InMemoryRows(
                store: store, schema: schema,
                changedRows: transaction.changes.mapValues { Set($0.inserted + $0.updated.map(\.row)) },
                images: transaction.images)
        }
    }

    /// One entity's read rule, checked against one transaction's rows.
    struct Check: Hashable {
        /// The entity.
        var entity: String
        /// Its read rule.
        var read: PredicateNode
    }

    /// The changes of `transaction` the key may see, by entity (none left out
    /// when empty), advancing the baseline; `nil` before the baseline was read.
    ///
    /// - Parameters:
    ///   - store: reads the state `transaction` left (`nil`: no snapshot was taken; only rules
    ///     that evaluate in memory on the row images can be checked then, ``readsStore``).
    ///   - checks: what other observers found for `transaction`, shared with them.
    func changes(of transaction: CommittedTransaction, store: Store?, checks: inout Checks) throws(RPCError)
        -> [String: EntityChanges]?
    {
        let schema = checks.rows.schema
        return try state.withLock { (state) throws(RPCError) -> [String: EntityChanges]? in
            guard state.visible != nil else { return nil }
            var changes: [String: EntityChanges] = [:]
            for (name, set) in transaction.changes {
                if let entities, !entities.contains(name) { continue }
                guard let read = state.scope.read(name) else {
                    changes[name] = set.wire
                    continue
                }
                let check = Check(entity: name, read: read)
                let after: Set<Int64>
                if let found = checks.found[check] {
                    after = found
                } else if read == .constant(false) {
                    after = []
                } else if let follow = state.inMemory[name], let entity = schema.entity(named: name) {
                    var touched = Set(set.inserted + set.updated.map(\.row))
                    if let equality = follow.equality {
                        // `owner == $keyName`: only rows holding the key's value can match (no evaluation for others).
                        let rows = try checks.rows.rows(of: entity)
                        touched = touched.filter { rows[$0]?.object[equality.key] == equality.value }
                    }
                    after =
                        touched.isEmpty
                        ? [] : Set(try checks.rows.evaluate(follow, entity: entity, rows: touched).keys)
                    checks.found[check] = after
                } else {
                    guard let store else { throw .internalError("no snapshot of the store after the commit") }
                    checks.sqlReads += 1
                    after = try Self.rows(set.inserted + set.updated.map(\.row), of: name, in: read, store: store)
                    checks.found[check] = after
                }
                // The baseline is changed in place: a transaction costs what it touched, not what the key sees.
                var seen = EntityChanges(inserted: [], updated: [], deleted: [])
                for row in set.inserted where after.contains(row) {
                    seen.inserted.append("\(name)/\(row)")
                    state.visible![name, default: []].insert(row)
                }
                for (row, keys) in set.updated {
                    switch (state.visible![name]?.contains(row) ?? false, after.contains(row)) {
                    case (true, true):
                        seen.updated.append(EntityChanges.Update(id: "\(name)/\(row)", keys: keys.sorted()))
                    case (false, true):
                        seen.inserted.append("\(name)/\(row)")
                        state.visible![name, default: []].insert(row)
                    case (true, false):
                        seen.deleted.append("\(name)/\(row)")
                        state.visible![name]?.remove(row)
                    case (false, false): break
                    }
                }
                for row in set.deleted where state.visible![name]?.remove(row) != nil {
                    seen.deleted.append("\(name)/\(row)")
                }
                if !(seen.inserted.isEmpty && seen.updated.isEmpty && seen.deleted.isEmpty) { changes[name] = seen }
            }
            return changes
        }
    }

    /// The scope the baseline was read with.
    var scope: KeyScope { state.withLock { $0.scope } }

    /// Whether checking a transaction may read the store: before its baseline is read, or when a
    /// rule of an observed entity does not evaluate in memory on the row images (one through a relationship).
    var readsStore: Bool {
        state.withLock { state in
            guard state.visible != nil else { return true }
            // Entities the model does not have (yet) count too: one a migration adds is read through SQL.
            return scopedEntities(of: state.scope).contains {
                state.inMemory[$0] == nil && state.scope.read($0) != .constant(false)
            }
        }
    }

    /// The observed entities whose rules evaluate in memory: what it checks on the commit's row images.
    var imagedEntities: Set<String> { state.withLock { Set($0.inMemory.keys) } }

    /// The observed entities that have a read scope (those of `schema`, when given).
    private func scopedEntities(of scope: KeyScope, schema: Schema? = nil) -> [String] {
        scope.entities.keys.filter { name in
            scope.read(name) != nil && (entities?.contains(name) ?? true)
                && (schema.map { $0.entity(named: name) != nil } ?? true)
        }
    }

    /// Which of `rows` of `entity` are in `read` in `store`: one read per 5,000 rows.
    private static func rows(_ rows: [Int64], of entity: String, in read: PredicateNode, store: Store)
        throws(RPCError) -> Set<Int64>
    {
        var found: Set<Int64> = []
        for start in stride(from: 0, to: rows.count, by: 5_000) {
            let chunk = rows[start..<min(start + 5_000, rows.count)]
            let request = FetchRequest(entity: entity, resultType: .ids)
            let named = PredicateNode.comparison(
                Comparison(
                    lhs: .keyPath(["SELF"]), op: .in,
                    rhs: .list(chunk.map { .value(.string(ObjectID(entity: entity, row: $0).description)) })))
            for id in try store.fetch(request, scope: ReadScope(rules: [entity: .and([read, named])])).ids ?? [] {
                if let row = ObjectID(id)?.row { found.insert(row) }
            }
        }
        return found
    }
}
