import DepotProtocol
import DepotStore

/// The live result sets, by sharing key, filed so that a transaction finds
/// the sets it can change without a pass over every set: a set whose request
/// pins an attribute to one value (``InMemoryFollow/equality``) is filed under
/// that entity, key and value; every other set under each entity whose
/// changes can affect it (its own and its dependencies').
///
/// A value owned by ``ResultsEngine`` and touched only in publish-lane jobs.
struct SetIndex {
    /// The sets by sharing key.
    private(set) var sets: [ByteString: ResultSet] = [:]
    /// The installed sets by identity: a commit's filing and lookups go by `ObjectIdentifier`, never
    /// by hashing and comparing the sharing keys' text (hundreds of bytes each, per set, per commit).
    private var installed: Set<ObjectIdentifier> = []
    /// Filed sets: entity → key → value → sets.
    private var byEquality: [String: [String: [JSONValue: Members]]] = [:]
    /// The other sets, under every entity whose changes can affect them.
    private var unfiled: [String: Members] = [:]
    /// For each filed entity and key: the current value of every row whose value has a filed set,
    /// so that a row leaving a value reaches the sets of its old value without a search.
    private var filedValues: [String: [String: [Int64: JSONValue]]] = [:]
    /// How many live sets read the store to follow a change of each entity (``ResultSet/readsStore``).
    private(set) var readingEntities: [String: Int] = [:]
    /// How many live sets follow each entity's changes from the commit's row images alone.
    private(set) var imagedEntities: [String: Int] = [:]
    /// How many live sets read the store to follow a commit more than their own windows' rows
    /// (``ResultSet/readsOnlyItsWindow``): a read through a relationship may cover a table.
    private(set) var unboundedReaders = 0

    /// Sets by identity.
    typealias Members = [ObjectIdentifier: ResultSet]

    /// The sets filed by equality under one entity: key → value → sets.
    typealias Filing = [String: [JSONValue: Members]]

    /// The set under `key`.
    subscript(key: ByteString) -> ResultSet? { sets[key] }

    /// Whether `set` itself (not another set under its key) is installed.
    func contains(_ set: ResultSet) -> Bool { installed.contains(ObjectIdentifier(set)) }

    /// Installs `set` under `key`, filing it by its equality term or under its entities.
    mutating func install(_ set: ResultSet, key: ByteString) {
        if sets[key] != nil { uninstall(key) }
        sets[key] = set
        installed.insert(ObjectIdentifier(set))
        countNeeds(of: set, by: 1)
        let entity = set.plan.entity.name
        // A prefetching set hears of its related entities too; their changes find rows through its graph.
        guard let (name, value) = set.filedEquality else {
            for name in Self.entities(of: set) { unfiled[name, default: [:]][ObjectIdentifier(set)] = set }
            return
        }
        byEquality[entity, default: [:]][name, default: [:]][value, default: [:]][ObjectIdentifier(set)] = set
        var values = filedValues[entity]?[name] ?? [:]
        for entry in set.index.entries(in: 0..<set.index.count) { values[entry.id] = value }
        filedValues[entity, default: [:]][name] = values
    }

    /// Removes the set under `key` and its filing; returns it.
    @discardableResult
    mutating func uninstall(_ key: ByteString) -> ResultSet? {
        guard let set = sets.removeValue(forKey: key) else { return nil }
        let identity = ObjectIdentifier(set)
        installed.remove(identity)
        countNeeds(of: set, by: -1)
        let entity = set.plan.entity.name
        guard let (name, value) = set.filedEquality else {
            for name in Self.entities(of: set) {
                unfiled[name]?[identity] = nil
                if unfiled[name]?.isEmpty == true { unfiled[name] = nil }
            }
            return set
        }
        byEquality[entity]?[name]?[value]?[identity] = nil
        if byEquality[entity]?[name]?[value]?.isEmpty == true {
            byEquality[entity]?[name]?[value] = nil
            // No set of this value is left: its rows need no filing.
            for entry in set.index.entries(in: 0..<set.index.count)
            where filedValues[entity]?[name]?[entry.id] == value {
                filedValues[entity]?[name]?[entry.id] = nil
            }
        }
        return set
    }

    /// The entities whose changes an unfiled set hears of: its own, its dependencies' and its related ones'.
    private static func entities(of set: ResultSet) -> Set<String> {
        Set([set.plan.entity.name] + set.dependencies.map(\.entity)).union(set.related?.plan.destinations ?? [])
    }

    /// Counts what following `set` needs of each commit (``readingEntities``, ``imagedEntities``).
    private mutating func countNeeds(of set: ResultSet, by step: Int) {
        func add(_ entity: String, to counts: inout [String: Int]) {
            let count = counts[entity, default: 0] + step
            counts[entity] = count > 0 ? count : nil
        }
        guard set.readsStore else { return add(set.plan.entity.name, to: &imagedEntities) }
        for entity in Self.entities(of: set) { add(entity, to: &readingEntities) }
        if !set.readsOnlyItsWindow { unboundedReaders += step }
    }

    /// The sets `transaction` can change: the unfiled ones of its entities, and
    /// the filing of the filed ones (narrowed by ``narrow(_:filing:rows:)``).
    func affected(by transaction: CommittedTransaction) -> (unfiled: [ResultSet], filing: [String: Filing]) {
        var found: Members?
        var filing: [String: Filing] = [:]
        for entity in transaction.changes.keys {
            if let sets = unfiled[entity] {
                // One entity's sets need no merge (the common commit changes one entity).
                if found == nil { found = sets } else { found!.merge(sets) { first, _ in first } }
            }
            if let filed = byEquality[entity] { filing[entity] = filed }
        }
        return (found.map { Array($0.values) } ?? [], filing)
    }

    /// Every filed set of `filing`.
    func sets(in filing: [String: Filing]) -> [ResultSet] {
        filing.values.flatMap(\.values).flatMap(\.values).flatMap(\.values)
    }

    /// The filed sets that `transaction` can change, each with the changed rows
    /// it must look at: a row goes to the sets of its new value and of the
    /// value it had, and its new value is recorded. `rows(entity)` reads the
    /// changed rows of an entity; an entity whose rows cannot be read sends
    /// every changed row to each of its filed sets, and is returned in
    /// `unread`: ``refile(_:)`` files it anew once the sets followed.
    mutating func narrow(
        _ transaction: CommittedTransaction, filing: [String: Filing],
        rows: (String) -> [Int64: EvaluationRow]?
    ) -> (sets: [(ResultSet, Set<Int64>)], unread: [String]) {
        var perSet: [ObjectIdentifier: (set: ResultSet, rows: Set<Int64>)] = [:]
        func send(_ ids: some Sequence<Int64>, to sets: Members) {
            for (identity, set) in sets { perSet[identity, default: (set, [])].rows.formUnion(ids) }
        }
        var unread: [String] = []
        for (entityName, keys) in filing {
            guard let changes = transaction.changes[entityName] else { continue }
            let changed = Set(changes.allRows)
            guard let read = rows(entityName) else {
                unread.append(entityName)
                for sets in keys.values.flatMap(\.values) { send(changed, to: sets) }
                continue
            }
            for (key, byValue) in keys {
                for id in changed {
                    let new = read[id]?.object[key]
                    let old = filedValues[entityName]?[key]?[id]
                    if let new, let sets = byValue[new] { send(CollectionOfOne(id), to: sets) }
                    if let old, old != new, let sets = byValue[old] { send(CollectionOfOne(id), to: sets) }
                    if old != new {
                        let filed = new.map { byEquality[entityName]?[key]?[$0] != nil } ?? false
                        filedValues[entityName, default: [:]][key, default: [:]][id] = filed ? new : nil
                    }
                }
            }
        }
        return (perSet.values.map { ($0.set, $0.rows) }, unread)
    }

    /// Files anew the rows of the filed sets of `entities` (after their rows could not be read).
    mutating func refile(_ entities: [String]) {
        for entity in entities {
            filedValues[entity] = nil
            for set in (byEquality[entity] ?? [:]).values.flatMap(\.values).flatMap(\.values) {
                guard let (name, value) = set.filedEquality else { continue }
                for entry in set.index.entries(in: 0..<set.index.count) {
                    filedValues[entity, default: [:]][name, default: [:]][entry.id] = value
                }
            }
        }
    }
}
