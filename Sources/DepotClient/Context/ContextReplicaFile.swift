import DepotProtocol
import Foundation
import GRDB

/// The local SQLite file of an ``ObjectContext`` with a persistent store (DESIGN.md §9): the
/// objects it holds (as last known, with saves queued offline applied) and the model, for
/// offline reads; the saves queued offline are its ``queue``.
///
/// Written with GRDB directly (`DepotClient` never imports `DepotStore`), in the one schema of
/// ``ReplicaFile``; it may be the same file as controllers' (``ResultsReplicaFile``): the tables differ.
final class ContextReplicaFile: Sendable {
    private let pool: DatabasePool

    /// The saves queued in the file while the daemon was out of reach, and the failed replays.
    let queue: OfflineSaveQueue

    /// Opens (creating or upgrading if needed) the file at `url` (``ReplicaFile``).
    init(url: URL) throws(DepotClientError) {
        pool = try ReplicaFile.open(url)
        queue = OfflineSaveQueue(pool: pool)
    }

    // MARK: Objects

    /// Writes `objects` (replacing what the file held under their ids) and forgets `removed`.
    func store(_ objects: [DepotObject], removing removed: [String] = []) throws(DepotClientError) {
        guard !objects.isEmpty || !removed.isEmpty else { return }
        try write { db in try Self.write(objects, removing: removed, in: db) }
    }

    /// Writes `objects` and forgets `removed` in `db`'s transaction (a save queued with the objects
    /// it leaves, ``OfflineSaveQueue/enqueue(_:objects:removing:)``).
    static func write(_ objects: [DepotObject], removing removed: [String], in db: Database) throws {
        for id in removed { try db.execute(sql: "DELETE FROM context_object WHERE id = ?", arguments: [id]) }
        for object in objects {
            try db.execute(
                sql: "INSERT OR REPLACE INTO context_object (id, entity, object) VALUES (?, ?, ?)",
                arguments: [object.id, object.entity, text(object.json)])
        }
    }

    /// The object stored under `id`, if any.
    func object(withID id: String) throws(DepotClientError) -> DepotObject? {
        try read { db in
            try String.fetchOne(db, sql: "SELECT object FROM context_object WHERE id = ?", arguments: [id])
                .map { try DepotObject(json: JSONParser.parse($0)) }
        }
    }

    /// Every object of `entity` the file holds.
    func objects(ofEntity entity: String) throws(DepotClientError) -> [DepotObject] {
        try read { db in
            try String.fetchAll(db, sql: "SELECT object FROM context_object WHERE entity = ?", arguments: [entity])
                .map { try DepotObject(json: JSONParser.parse($0)) }
        }
    }

    /// Keeps the daemon's model (for evaluating predicates offline).
    ///
    /// Objects kept under another model version are forgotten: they are in
    /// that model's shape, and are fetched again as they are needed (DESIGN.md §9).
    func storeModel(_ entities: [EntityDescription], version: Int64) throws(DepotClientError) {
        let text = try Self.text(entities)
        try write { db in
            if let recorded = try ReplicaVersions.value(db, "context model"), recorded != version {
                try db.execute(sql: "DELETE FROM context_object")
            }
            try ReplicaVersions.set(db, "context model", version)
            try db.execute(
                sql: "INSERT OR REPLACE INTO context_model (singleton, entities) VALUES (0, ?)", arguments: [text])
            try ReplicaFile.setModelVersion(db, version)
        }
    }

    /// The model kept by ``storeModel(_:version:)``, if any.
    func model() throws(DepotClientError) -> [EntityDescription]? {
        try read { db in
            try String.fetchOne(db, sql: "SELECT entities FROM context_model").map { try Self.decode($0) }
        }
    }

    // MARK: Plumbing

    private func read<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        try pool.readReplica(body)
    }

    private func write<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        try pool.writeReplica(body)
    }

    static func text(_ json: JSONValue) -> String { String(decoding: JSONWriter.encode(json), as: UTF8.self) }

    static func text<T: Encodable>(_ value: T) throws(DepotClientError) -> String {
        do {
            return text(try JSONCoding.encode(value))
        } catch {
            throw .persistentStore("cannot encode \(T.self) for the persistent store: \(error.message)")
        }
    }

    static func decode<T: Decodable>(_ text: String) throws -> T {
        try JSONCoding.decode(T.self, from: JSONParser.parse(text), field: "persistentStore")
    }
}

/// A save queued while the daemon was out of reach whose replay the daemon refused (a conflict
/// under `.error`, a uniqueness constraint, a validation error, a write outside the key's scope):
/// what ``ObjectContext/failedSaves()`` yields. It stays in the persistent store until
/// ``ObjectContext/dismissFailedSave(_:)``, so none is lost when nobody was listening.
public struct FailedSave: Sendable, Hashable {
    /// Its place in the queue.
    public var number: Int64
    /// The change as it was sent (`saveId` and merge policy included).
    public var change: StoreSave.Parameters
    /// The daemon's error.
    public var error: RPCError

    /// Creates a record.
    public init(number: Int64, change: StoreSave.Parameters, error: RPCError) {
        self.number = number
        self.change = change
        self.error = error
    }
}
