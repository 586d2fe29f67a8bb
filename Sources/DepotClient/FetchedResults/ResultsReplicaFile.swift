import DepotProtocol
import Foundation
import GRDB

/// The local SQLite file in which controllers keep their results (DESIGN.md §9,
/// `FetchedResultsController(…, persistentStore:)`): for each request, its
/// sections of ids, their `seq`, the transaction they reflect, and the values
/// of the objects loaded. Several controllers may share one file: each keeps
/// its results under its request and section key path.
///
/// It is the client's own file, written with GRDB directly (`DepotClient`
/// never imports `DepotStore`), in WAL mode so that reading never waits for a write.
final class ResultsReplicaFile: Sendable {
    /// What the file holds for one controller.
    struct Stored {
        var layout: ResultsLayout
        var transaction: Int64
        var objects: [DepotObject]
        /// The model version the objects are of, if known.
        var modelVersion: Int64?
        /// The related objects the rows reach (a prefetching request's).
        var related: [DepotObject] = []
    }

    /// The key the related objects of the results under `key` are kept under, beside their rows
    /// in `replica_object` (a results key is JSON text: it never starts this way).
    static func relatedKey(_ key: String) -> String { "related " + key }

    private let pool: DatabasePool

    /// Opens (creating or upgrading if needed) the file at `url` (``ReplicaFile``).
    init(url: URL) throws(DepotClientError) {
        pool = try ReplicaFile.open(url)
    }

    /// The key a controller's results are stored under: its request and section key path.
    static func key(request: DepotProtocol.FetchRequest, sectionNameKeyPath: String?) throws(DepotClientError) -> String
    {
        do throws(RPCError) {
            let json: JSONValue = [
                "request": try JSONCoding.encode(request),
                "sectionNameKeyPath": sectionNameKeyPath.map { .string($0) } ?? .null,
            ]
            return String(decoding: JSONWriter.encode(json), as: UTF8.self)
        } catch {
            throw .persistentStore("cannot encode the request as the persistent store's key: \(error.message)")
        }
    }

    /// The layout and transaction the file holds under `key`, if any, without the objects (they
    /// are read by ``objects(key:ids:)`` as they are needed).
    func loadLayout(key: String) throws(DepotClientError) -> (
        layout: ResultsLayout, transaction: Int64, modelVersion: Int64?
    )? {
        do {
            return try pool.read { db -> (ResultsLayout, Int64, Int64?)? in
                guard
                    let row = try Row.fetchOne(
                        db, sql: "SELECT sections, seq, transaction_number FROM replica_results WHERE key = ?",
                        arguments: [key])
                else { return nil }
                let sections = try JSONParser.parse(row["sections"] as String).arrayValue ?? []
                let layout = ResultsLayout(
                    seq: row["seq"],
                    sections: sections.map { section in
                        ResultsLayout.Section(
                            name: section["name"]?.stringValue ?? "", indexTitle: section["indexTitle"]?.stringValue,
                            ids: (section["ids"]?.arrayValue ?? []).compactMap(\.stringValue))
                    })
                return (layout, row["transaction_number"], try ReplicaVersions.value(db, Self.modelName(key)))
            }
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    /// The objects stored under `key` with one of `ids` (those it has).
    func objects(key: String, ids: [String]) throws(DepotClientError) -> [DepotObject] {
        do {
            return try pool.read { db in
                var objects: [DepotObject] = []
                var start = 0
                while start < ids.count {
                    let chunk = Array(ids[start..<min(start + 500, ids.count)])
                    let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
                    objects += try String.fetchAll(
                        db, sql: "SELECT object FROM replica_object WHERE key = ? AND id IN (\(marks))",
                        arguments: StatementArguments([key] + chunk)
                    ).map { text in try DepotObject(json: JSONParser.parse(text)) }
                    start += chunk.count
                }
                return objects
            }
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    /// Every object stored under `key` (the related objects of a prefetching request's results).
    func allObjects(key: String) throws(DepotClientError) -> [DepotObject] {
        do {
            return try pool.read { db in
                try String.fetchAll(db, sql: "SELECT object FROM replica_object WHERE key = ?", arguments: [key]).map {
                    text in try DepotObject(json: JSONParser.parse(text))
                }
            }
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    /// The ids of the objects stored under `key`.
    func storedIDs(key: String) throws(DepotClientError) -> Set<String> {
        do {
            return try pool.read { db in
                Set(try String.fetchAll(db, sql: "SELECT id FROM replica_object WHERE key = ?", arguments: [key]))
            }
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    /// Writes the layout and transaction under `key`, the objects in `upserting`, and forgets the
    /// objects of `removed`, in one transaction: what changed since the last write.
    func update(
        key: String, layout: ResultsLayout, transaction: Int64, modelVersion: Int64?, upserting objects: [DepotObject],
        removing removed: [String], related: (upserting: [DepotObject], removing: [String]) = ([], [])
    ) throws(DepotClientError) {
        do {
            try pool.write { db in
                try Self.writeResults(
                    db, key: key, layout: layout, transaction: transaction, modelVersion: modelVersion)
                for (key, objects, removed) in [
                    (key, objects, removed), (Self.relatedKey(key), related.upserting, related.removing),
                ] {
                    for id in removed {
                        try db.execute(
                            sql: "DELETE FROM replica_object WHERE key = ? AND id = ?", arguments: [key, id])
                    }
                    for object in objects {
                        try db.execute(
                            sql: "INSERT OR REPLACE INTO replica_object (key, id, object) VALUES (?, ?, ?)",
                            arguments: [key, object.id, Self.objectText(object)])
                    }
                }
            }
        } catch {
            throw .persistentStore("cannot write the persistent store: \(error)")
        }
    }

    /// The `replica_meta` name of the model version of the results under `key`.
    private static func modelName(_ key: String) -> String { "results model " + key }

    /// Writes the layout, transaction and model version kept under `key`.
    private static func writeResults(
        _ db: Database, key: String, layout: ResultsLayout, transaction: Int64, modelVersion: Int64?
    ) throws {
        if let modelVersion {
            try ReplicaVersions.set(db, modelName(key), modelVersion)
        } else {
            try ReplicaVersions.remove(db, modelName(key))
        }
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO replica_results (key, sections, seq, transaction_number)
                VALUES (?, ?, ?, ?)
                """,
            arguments: [key, sectionsText(layout), layout.seq, transaction])
    }

    private static func objectText(_ object: DepotObject) -> String {
        String(decoding: JSONWriter.encode(object.json), as: UTF8.self)
    }

    private static func sectionsText(_ layout: ResultsLayout) -> String {
        let sections = JSONValue.array(
            layout.sections.map { section in
                [
                    "name": .string(section.name), "indexTitle": .string(section.indexTitle),
                    "ids": .array(section.ids.map { .string($0) }),
                ]
            })
        return String(decoding: JSONWriter.encode(sections), as: UTF8.self)
    }

    /// Replaces what the file holds under `key`, in one transaction (a crash keeps the old or the new).
    func save(key: String, _ stored: Stored) throws(DepotClientError) {
        do {
            try pool.write { db in
                try Self.writeResults(
                    db, key: key, layout: stored.layout, transaction: stored.transaction,
                    modelVersion: stored.modelVersion)
                for (key, objects) in [(key, stored.objects), (Self.relatedKey(key), stored.related)] {
                    try db.execute(sql: "DELETE FROM replica_object WHERE key = ?", arguments: [key])
                    for object in objects {
                        try db.execute(
                            sql: "INSERT INTO replica_object (key, id, object) VALUES (?, ?, ?)",
                            arguments: [key, object.id, Self.objectText(object)])
                    }
                }
            }
        } catch {
            throw .persistentStore("cannot write the persistent store: \(error)")
        }
    }
}

extension FetchedResultsController {
    /// Why the results could not be written to the ``persistentStore`` last time; `nil` once a write succeeded.
    public var persistentStoreError: DepotClientError? { state.withLock { $0.persistentStoreError } }

    /// Opens the persistent store (once) and shows what it holds for the current request, reported
    /// as a reload; returns whether it held anything. Only the layout is read now: the objects are
    /// read from the file as they are touched (``fillFromPersistentStore(ids:)``), so that the first
    /// content costs the ids, not the values.
    func showStoredResults() async throws(DepotClientError) -> Bool {
        guard let persistentStore else { return false }
        let key = try ResultsReplicaFile.key(request: fetchRequest, sectionNameKeyPath: sectionNameKeyPath)
        let file: ResultsReplicaFile
        if let opened = state.withLock({ $0.replica?.file }) {
            file = opened
        } else {
            file = try ResultsReplicaFile(url: persistentStore)
        }
        state.withLock { $0.replica = (file, key) }
        guard let stored = try file.loadLayout(key: key) else { return false }
        // The related objects are few beside the rows (ids shared by many rows): read at once.
        let related = fetchRequest.prefetch == nil ? [] : try file.allObjects(key: ResultsReplicaFile.relatedKey(key))
        state.withLock { state in
            state.related = Dictionary(related.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
            state.layout = stored.layout
            state.subscription = nil
            state.transaction = stored.transaction
            state.modelVersion = stored.modelVersion
            state.entries = [:]
            state.replicaWrites = ReplicaWrites()
            state.indexPaths = nil
        }
        await announceReload(layout: stored.layout, transaction: stored.transaction)
        return true
    }

    /// Asks the daemon for its model version and takes it as the one the results are of (`nil`
    /// when it cannot tell: the results are then recorded with no model, and resync next time).
    @discardableResult
    func learnModelVersion() async -> Int64? {
        let version = try? await connection.call(ModelGet.self, Empty()).version
        state.withLock { $0.modelVersion = version }
        return version
    }

    /// Whether the results shown from the persistent store are of the daemon's model now.
    func storedModelIsCurrent() async -> Bool {
        guard let stored = state.withLock({ $0.modelVersion }),
            let current = try? await connection.call(ModelGet.self, Empty()).version
        else { return false }
        return current == stored
    }

    /// Reads the objects of `ids` that are not loaded from the persistent store, if there is one.
    func fillFromPersistentStore(ids: [String]) {
        guard let (file, key) = state.withLock({ $0.replica }) else { return }
        let missing = state.withLock { state in ids.filter { state.entries[$0] == nil } }
        guard !missing.isEmpty, let objects = try? file.objects(key: key, ids: missing) else { return }
        state.withLock { state in
            // Read from the file: nothing to write back.
            for object in objects where state.entries[object.id] == nil {
                state.entries[object.id] = Entry(raw: object, object: try? Object.make(from: object))
            }
        }
    }

    /// Writes to the persistent store behind the caller, on ``replicaWriter`` (in order): the
    /// results in memory are right at once, the file follows.
    func persistBehind() {
        guard persistentStore != nil else { return }
        replicaWriter.async { self.persist() }
    }

    /// Waits until what was written behind (``persistBehind()``) is in the persistent store.
    public func waitForPersistentStore() async {
        await withCheckedContinuation { continuation in replicaWriter.async { continuation.resume() } }
    }

    /// Writes what changed in the results since the last write to the persistent store, if there
    /// is one (everything after the results were replaced); a failure is kept in
    /// ``persistentStoreError`` (the results in memory are right, the file is behind).
    func persist() {
        let snapshot = state.withLock { state -> (ResultsReplicaFile, String, ReplicaWrite, ReplicaWrites)? in
            guard let (file, key) = state.replica, let layout = state.layout, state.subscription != nil else {
                return nil
            }
            let writes = state.replicaWrites
            state.replicaWrites = ReplicaWrites()
            let (transaction, model) = (state.transaction ?? 0, state.modelVersion)
            if writes.all {
                let objects = layout.ids.compactMap { state.entries[$0]?.raw }
                return (
                    file, key,
                    .all(
                        ResultsReplicaFile.Stored(
                            layout: layout, transaction: transaction, objects: objects, modelVersion: model,
                            related: Array(state.related.values))),
                    writes
                )
            }
            let objects = writes.changed.compactMap { state.entries[$0]?.raw }
            return (
                file, key,
                .changes(
                    layout: layout, transaction: transaction, modelVersion: model, objects: objects,
                    removed: Array(writes.removed),
                    related: (writes.relatedChanged.compactMap { state.related[$0] }, Array(writes.relatedRemoved))),
                writes
            )
        }
        guard let (file, key, write, writes) = snapshot else { return }
        let failure: DepotClientError?
        do {
            switch write {
            case .all(let stored): try file.save(key: key, stored)
            case .changes(let layout, let transaction, let model, let objects, let removed, let related):
                try file.update(
                    key: key, layout: layout, transaction: transaction, modelVersion: model, upserting: objects,
                    removing: removed, related: related)
            }
            failure = nil
        } catch {
            failure = error
        }
        state.withLock { state in
            state.persistentStoreError = failure
            // Not written: written next time.
            if failure != nil { state.replicaWrites.merge(writes) }
        }
    }
}

/// One write of a controller's results to its persistent store.
enum ReplicaWrite {
    /// Everything, replacing what the file held.
    case all(ResultsReplicaFile.Stored)
    /// The layout, and the objects (rows and related ones) that changed or left since the last write.
    case changes(
        layout: ResultsLayout, transaction: Int64, modelVersion: Int64?, objects: [DepotObject], removed: [String],
        related: (upserting: [DepotObject], removing: [String]))
}

/// What a controller's persistent store lacks: the objects changed or removed since the last
/// write, or everything (the results were replaced).
struct ReplicaWrites {
    var all = false
    var changed: Set<String> = []
    var removed: Set<String> = []
    /// The related objects changed or no longer reached since the last write.
    var relatedChanged: Set<String> = []
    var relatedRemoved: Set<String> = []

    /// Records that `id`'s values changed.
    mutating func change(_ id: String) {
        changed.insert(id)
        removed.remove(id)
    }

    /// Records that `id` left the results.
    mutating func remove(_ id: String) {
        removed.insert(id)
        changed.remove(id)
    }

    /// Records a change's related objects: `changed` arrived (new or new values), `removed` are no longer reached.
    mutating func relate(changed: some Sequence<String>, removed: some Sequence<String>) {
        for id in changed {
            relatedChanged.insert(id)
            relatedRemoved.remove(id)
        }
        for id in removed {
            relatedRemoved.insert(id)
            relatedChanged.remove(id)
        }
    }

    mutating func merge(_ other: ReplicaWrites) {
        all = all || other.all
        changed.formUnion(other.changed)
        removed.formUnion(other.removed)
        relatedChanged.formUnion(other.relatedChanged)
        relatedRemoved.formUnion(other.relatedRemoved)
    }
}
