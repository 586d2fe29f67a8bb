import DepotProtocol
import DepotStore

/// The store as one request's key sees it (DESIGN.md §2, "Scopes are applied
/// by construction"): the dispatcher builds it once per request from the key
/// and the method's ``Scoping``, and a handler reads and writes rows only
/// through it. Every read is narrowed to the key's read scope, every write
/// checked against its write scope, and an entity the key cannot read
/// (`FALSEPREDICATE`) does not exist: naming it is the unknown-entity -32602,
/// whose list names only the entities the key can read.
struct StoreView: Sendable {
    /// The store underneath; private, so that no handler reads it past the scope.
    private let store: Store
    /// The key the view is for (`nil` on `ipc://` or plain TCP).
    let key: AuthorizedKey?
    /// The key's scope; `nil` when it has none or the method's registration is not ``Scoping/scoped``.
    let scope: KeyScope?
    /// The rows of each entity the key may read.
    let read: ReadScope
    /// What the key may insert, update and delete.
    let write: WriteScope
    /// How the method's registration said it treats scopes: only ``Scoping/unscoped(reason:)``
    /// and ``Scoping/adminOnly(reason:)`` ones reach the whole store (``unscopedStore()``).
    let scoping: Scoping

    /// The view of `store` for `key` calling a method registered with `scoping`: the key's scope
    /// for ``Scoping/scoped`` methods, the whole store for the others (their registration says why).
    init(store: Store, key: AuthorizedKey?, scoping: Scoping) {
        self.store = store
        self.key = key
        self.scoping = scoping
        let scope = scoping == .scoped ? key?.scope : nil
        self.scope = scope
        if let scope, let key {
            read = ReadScope(rules: scope.entities.compactMapValues(\.read))
            var write = scope.writeScope(keyName: key.name) ?? WriteScope(rules: [:], keyName: key.name)
            write.hidden = Set(scope.entities.keys.filter { scope.hides($0) })
            self.write = write
        } else {
            read = .unrestricted
            write = .unrestricted
        }
    }

    /// The whole store, for the daemon's own requests and methods that say why they need it.
    static func unrestricted(_ store: Store) -> StoreView {
        StoreView(store: store, key: nil, scoping: .unscoped(reason: "the daemon's own"))
    }

    /// The model as it is now.
    var schema: Schema { store.schema }

    // MARK: Entities

    /// The entity `name` if it exists for the key.
    ///
    /// - Throws: -32602 naming `field` for an unknown entity and for one the key
    ///   cannot read, alike: the list names only the entities the key can read.
    func entity(_ name: String, field: String) throws(RPCError) -> EntitySchema {
        let schema = store.schema
        guard let entity = schema.entity(named: name), !read.hides(entity.name) else {
            let known = schema.entities.map(\.name).filter { !read.hides($0) }.joined(separator: ", ")
            throw .invalidParams(
                "unknown entity '\(name)' (the model has: \(known.isEmpty ? "no entities" : known))", field: field)
        }
        return entity
    }

    /// The entity of the object id `text` if it exists for the key; a malformed id is left to the store.
    private func checkEntity(ofID text: String, field: String) throws(RPCError) {
        guard !read.isUnrestricted, let id = ObjectID(text) else { return }
        _ = try entity(id.entity, field: field)
    }

    /// `model/get`: the entities the key can read, without relationships to the others.
    func model() -> ModelGet.Result {
        let schema = store.schema.visible(to: read)
        return ModelGet.Result(
            version: schema.version, entities: schema.descriptions.filter { !read.hides($0.name) })
    }

    // MARK: Reads

    /// Checks `request` for the key: its entity exists for it, and no key path crosses into an entity
    /// it reads only through a scope (-32018).
    func check(_ request: FetchRequest, field: String) throws(RPCError) {
        guard let scope, let key else { return }
        _ = try entity(request.entity, field: "\(field).entity")
        // Read against the model as the key sees it: a relationship to an entity it cannot read is
        // no relationship, left to the store's unknown-key -32602.
        let schema = store.schema.visible(to: read)
        guard let entity = schema.entity(named: request.entity) else { return }
        try ScopeGuard(scope: scope, keyName: key.name, schema: schema).checkPaths(
            of: request, entity: entity, field: field)
    }

    /// `store/fetch` in the key's scope, encoded batch by batch (``Store/fetchEncoded(_:scope:cancellation:total:onBatch:)``).
    func fetchEncoded(
        _ request: FetchRequest, field: String, cancellation: Cancellation?, total: ((Int) -> Void)?,
        related: ((PrefetchedGraph) -> Void)? = nil, onBatch: (EncodedBatch) throws(RPCError) -> Void
    ) throws(RPCError) -> (count: Int, transaction: Int64) {
        try check(request, field: field)
        return try store.fetchEncoded(
            request, scope: read, cancellation: cancellation, total: total, related: related, onBatch: onBatch)
    }

    /// `store/count` in the key's scope.
    func count(_ request: FetchRequest, field: String) throws(RPCError) -> Int {
        try check(request, field: field)
        return try store.count(request, scope: read)
    }

    /// `store/get` in the key's scope: `null` for an object outside it, as for a missing one.
    func objects(ids: [String], properties: [String]?) throws(RPCError) -> [JSONValue] {
        for (index, id) in ids.enumerated() { try checkEntity(ofID: id, field: "ids[\(index)]") }
        return try store.objects(ids: ids, properties: properties, scope: read)
    }

    /// The definition of a `results/subscribe` request: its effective request (request AND scope)
    /// decides membership and sharing.
    func resultsDefinition(_ params: ResultsSubscribe.Parameters) throws(RPCError) -> ResultsDefinition {
        try check(params.request, field: "params.request")
        return try ResultsDefinition(params, scope: read, schema: store.schema)
    }

    /// The observation of a `store/observe` of `entities` (each checked to exist for the key):
    /// `nil` when the key has no scope, so its observer hears every transaction.
    func observation(of entities: [String]?) throws(RPCError) -> ScopedObservation? {
        for (index, name) in (entities ?? []).enumerated() {
            _ = try entity(name, field: "params.entities[\(index)]")
        }
        return scope.map { ScopedObservation(scope: $0, entities: entities) }
    }

    /// `store/history` as the key's observer heard it (``HistoryScope``); all of it for a key without a scope.
    func history(since: Int64, limit: Int?) throws(RPCError) -> StoreHistory.Result {
        // A replica that joined its cluster from a snapshot has no history before it.
        if let begins = try store.historyBegins(), since < begins {
            throw .invalidParams(
                "this daemon's history begins after transaction \(begins) (it started from the cluster's snapshot, joining or rebuilding itself): ask for since >= \(begins), or ask a daemon that has it",
                field: "since")
        }
        guard let key, let scope else { return try store.history(since: since, limit: limit) }
        // A scoped key reads what its observer heard: judged on the values recorded with each transaction.
        let filter = try HistoryScope(key: key, scope: scope, schema: store.schema)
        let withheld = WithheldKeys(schema: store.schema, hides: read.hides)
        var unjudged = false
        do throws(RPCError) {
            return try store.history(since: since, limit: limit) { (entry) throws(RPCError) in
                guard filter.judges(entry) else {
                    unjudged = true
                    throw filter.unjudged(through: entry.number)
                }
                return try filter.changes(of: entry).map(withheld.filter)
            }
        } catch {
            guard unjudged else { throw error }
            // Recorded before a policy that reads these values: name the newest such transaction.
            let older = try store.history(since: since, limit: 10_000) { entry in
                filter.judges(entry) ? nil : [:]
            }
            throw filter.unjudged(through: older.transactions.last?.transaction ?? since)
        }
    }

    // MARK: Writes

    /// `store/save` under the key's write scope; an entity it cannot read is unknown.
    func save(_ params: StoreSave.Parameters, in group: WriteGroup?) throws(RPCError) -> (
        StoreSave.Result, CommittedTransaction?
    ) {
        // An entity the key cannot read is an unknown one to the save (``WriteScope/hidden``).
        return try store.save(params, in: group, writeScope: write)
    }

    /// `store/batchInsert`'s objects checked and converted ahead of the writer.
    func prepareBatchInsert(_ params: BatchInsert.Parameters) throws(RPCError) -> PreparedBatchInsert {
        _ = try entity(params.entity, field: "params.entity")
        return try store.prepareBatchInsert(params)
    }

    /// `store/batchInsert` of a prepared batch under the key's write scope.
    func batchInsert(
        _ prepared: PreparedBatchInsert, cancellation: Cancellation?, progress: ((Int) -> Void)?
    ) throws(RPCError) -> (BatchInsert.Result, CommittedTransaction?) {
        _ = try entity(prepared.params.entity, field: "params.entity")
        return try store.batchInsert(prepared, cancellation: cancellation, progress: progress, writeScope: write)
    }

    /// `store/batchInsert` of a large request read lazily, under the key's write scope.
    func batchInsert(
        _ params: BatchInsert.StreamedParameters, cancellation: Cancellation?, progress: ((Int) -> Void)?
    ) throws(RPCError) -> (BatchInsert.Result, CommittedTransaction?) {
        _ = try entity(params.header.entity, field: "params.entity")
        return try store.batchInsert(params, cancellation: cancellation, progress: progress, writeScope: write)
    }

    /// `store/batchUpdate` of the objects in the key's read and write scopes.
    func batchUpdate(
        _ params: BatchUpdate.Parameters, cancellation: Cancellation?, total: ((Int) -> Void)?,
        progress: ((Int) -> Void)?
    ) throws(RPCError) -> (BatchUpdate.Result, CommittedTransaction?) {
        try check(
            FetchRequest(entity: params.entity, predicate: params.predicate, arguments: params.arguments),
            field: "params")
        return try store.batchUpdate(
            params, cancellation: cancellation, total: total, progress: progress, readScope: read, writeScope: write)
    }

    /// `store/batchDelete` of the objects in the key's read and write scopes.
    func batchDelete(
        _ params: BatchDelete.Parameters, cancellation: Cancellation?, total: ((Int) -> Void)?,
        progress: ((Int) -> Void)?
    ) throws(RPCError) -> (BatchDelete.Result, CommittedTransaction?) {
        try check(
            FetchRequest(entity: params.entity, predicate: params.predicate, arguments: params.arguments),
            field: "params")
        return try store.batchDelete(
            params, cancellation: cancellation, total: total, progress: progress, readScope: read, writeScope: write)
    }

    // MARK: Admin

    /// `model/define`: admin only (``Scoping/adminOnly``), on the whole model.
    func defineModel(_ entities: [EntityDescription], removing: [String]) throws(RPCError) -> ModelDefine.Result {
        try unscopedStore().defineModel(entities, removing: removing)
    }

    /// The whole store, for a method whose registration declared that it works past scopes
    /// (``Scoping/unscoped(reason:)``, ``Scoping/adminOnly(reason:)``: `results/deleteCache`,
    /// `server/backup`).
    ///
    /// - Throws: -32603 for a ``Scoping/scoped`` registration, whatever the key: such a handler
    ///   reads and writes through this view only, and asking for more is a bug to report, not to serve.
    func unscopedStore() throws(RPCError) -> Store {
        guard scoping != .scoped else {
            throw .internalError("a method registered as scoped asked for the unscoped store")
        }
        return store
    }
}
