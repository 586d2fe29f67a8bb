import DepotProtocol
import Foundation
import GRDB

/// The local SQLite file of an ``ObjectContext`` with a persistent store (DESIGN.md §9): the
/// objects it holds (as last known, with saves queued offline applied), the saves queued while
/// the daemon was out of reach, in order, and the replays that failed, until they are dismissed.
///
/// Written with GRDB directly (`DepotClient` never imports `DepotStore`); it may be the same file
/// as controllers' (``ResultsReplicaFile``): the tables differ. Every write is committed with
/// `synchronous = FULL`, so a queued save survives a crash or a power cut once ``enqueue(_:)``
/// returns.
final class ContextReplicaFile: Sendable {
    /// A save queued in the file.
    struct Pending: Sendable {
        /// Its place in the queue.
        var number: Int64
        /// The `store/save` params, `saveId` and merge policy included.
        var params: StoreSave.Parameters
    }

    private let pool: DatabasePool

    /// The format this client writes (DESIGN.md §9): objects kept in another one are dropped.
    static let format: Int64 = 2

    /// Opens (creating if needed) the file at `url`.
    init(url: URL) throws(DepotClientError) {
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            pool = try DatabasePool(path: url.path, configuration: configuration)
            try pool.write { db in
                try db.execute(
                    sql: """
                        CREATE TABLE IF NOT EXISTS context_object (
                            id TEXT PRIMARY KEY NOT NULL,
                            entity TEXT NOT NULL,
                            object TEXT NOT NULL);
                        CREATE TABLE IF NOT EXISTS context_pending_save (
                            number INTEGER PRIMARY KEY AUTOINCREMENT,
                            params TEXT NOT NULL);
                        CREATE TABLE IF NOT EXISTS context_model (
                            singleton INTEGER PRIMARY KEY CHECK (singleton = 0),
                            entities TEXT NOT NULL);
                        CREATE TABLE IF NOT EXISTS context_failed_save (
                            number INTEGER PRIMARY KEY NOT NULL,
                            params TEXT NOT NULL,
                            error TEXT NOT NULL);
                        """)
                // Objects kept in another format are fetched again; queued saves are kept whatever happens.
                if try ReplicaVersions.formatChanged(db, name: "context format", format: Self.format) {
                    try db.execute(sql: "DELETE FROM context_object")
                }
            }
        } catch {
            throw .persistentStore("cannot open the persistent store at \(url.path): \(error)")
        }
    }

    // MARK: Objects

    /// Writes `objects` (replacing what the file held under their ids) and forgets `removed`.
    func store(_ objects: [DepotObject], removing removed: [String] = []) throws(DepotClientError) {
        guard !objects.isEmpty || !removed.isEmpty else { return }
        try write { db in
            for id in removed { try db.execute(sql: "DELETE FROM context_object WHERE id = ?", arguments: [id]) }
            for object in objects {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO context_object (id, entity, object) VALUES (?, ?, ?)",
                    arguments: [object.id, object.entity, Self.text(object.json)])
            }
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
        }
    }

    /// The model kept by ``storeModel(_:version:)``, if any.
    func model() throws(DepotClientError) -> [EntityDescription]? {
        try read { db in
            try String.fetchOne(db, sql: "SELECT entities FROM context_model").map { try Self.decode($0) }
        }
    }

    // MARK: Queued saves

    /// Queues `params` after the saves already queued, durably, with `objects` (the context's
    /// objects as the save leaves them) and without `removed`, in the same transaction.
    @discardableResult
    func enqueue(_ params: StoreSave.Parameters, objects: [DepotObject], removing removed: [String])
        throws(DepotClientError) -> Int64
    {
        let text = try Self.text(params)
        return try write { db in
            try db.execute(sql: "INSERT INTO context_pending_save (params) VALUES (?)", arguments: [text])
            let number = db.lastInsertedRowID
            for id in removed { try db.execute(sql: "DELETE FROM context_object WHERE id = ?", arguments: [id]) }
            for object in objects {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO context_object (id, entity, object) VALUES (?, ?, ?)",
                    arguments: [object.id, object.entity, Self.text(object.json)])
            }
            return number
        }
    }

    /// The queued saves, oldest first.
    func pending() throws(DepotClientError) -> [Pending] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT number, params FROM context_pending_save ORDER BY number").map { row in
                Pending(number: row["number"], params: try Self.decode(row["params"]))
            }
        }
    }

    /// Removes the save `number` from the queue (it committed) and rewrites the saves after it
    /// (`rewritten`: the permanent ids and new versions it produced), in one transaction.
    func complete(_ number: Int64, rewriting rewritten: [Pending]) throws(DepotClientError) {
        let texts = try rewritten.map { pending throws(DepotClientError) in
            (pending.number, try Self.text(pending.params))
        }
        try write { db in
            try db.execute(sql: "DELETE FROM context_pending_save WHERE number = ?", arguments: [number])
            for (number, text) in texts {
                try db.execute(
                    sql: "UPDATE context_pending_save SET params = ? WHERE number = ?", arguments: [text, number])
            }
        }
    }

    /// Moves the save `number` from the queue to the failed saves, with `error`.
    func fail(_ pending: Pending, error: RPCError) throws(DepotClientError) {
        let params = try Self.text(pending.params)
        let error = try Self.text(error)
        try write { db in
            try db.execute(sql: "DELETE FROM context_pending_save WHERE number = ?", arguments: [pending.number])
            try db.execute(
                sql: "INSERT OR REPLACE INTO context_failed_save (number, params, error) VALUES (?, ?, ?)",
                arguments: [pending.number, params, error])
        }
    }

    /// The failed replays not dismissed yet, oldest first.
    func failed() throws(DepotClientError) -> [FailedSave] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT number, params, error FROM context_failed_save ORDER BY number").map {
                row in
                FailedSave(
                    number: row["number"], change: try Self.decode(row["params"]), error: try Self.decode(row["error"]))
            }
        }
    }

    /// Forgets the failed save `number`.
    func dismissFailure(_ number: Int64) throws(DepotClientError) {
        try write { db in
            try db.execute(sql: "DELETE FROM context_failed_save WHERE number = ?", arguments: [number])
        }
    }

    // MARK: Plumbing

    private func read<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        do {
            return try pool.read(body)
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    private func write<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        do {
            return try pool.write(body)
        } catch {
            throw .persistentStore("cannot write the persistent store: \(error)")
        }
    }

    private static func text(_ json: JSONValue) -> String { String(decoding: JSONWriter.encode(json), as: UTF8.self) }

    private static func text<T: Encodable>(_ value: T) throws(DepotClientError) -> String {
        do {
            return text(try JSONCoding.encode(value))
        } catch {
            throw .persistentStore("cannot encode \(T.self) for the persistent store: \(error.message)")
        }
    }

    private static func decode<T: Decodable>(_ text: String) throws -> T {
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
