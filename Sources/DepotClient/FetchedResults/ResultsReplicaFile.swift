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
    }

    private let pool: DatabasePool

    /// Opens (creating if needed) the file at `url`.
    init(url: URL) throws(DepotClientError) {
        do {
            var configuration = Configuration()
            // Several controllers, each with its own pool, may write one file.
            configuration.busyMode = .timeout(10)
            pool = try DatabasePool(path: url.path, configuration: configuration)
            try pool.write { db in
                try db.execute(
                    sql: """
                        CREATE TABLE IF NOT EXISTS replica_results (
                            key TEXT PRIMARY KEY NOT NULL,
                            sections TEXT NOT NULL,
                            seq INTEGER NOT NULL,
                            transaction_number INTEGER NOT NULL);
                        CREATE TABLE IF NOT EXISTS replica_object (
                            key TEXT NOT NULL,
                            id TEXT NOT NULL,
                            object TEXT NOT NULL,
                            PRIMARY KEY (key, id));
                        """)
            }
        } catch {
            throw .persistentStore("cannot open the persistent store at \(url.path): \(error)")
        }
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

    /// What the file holds under `key`, if anything.
    func load(key: String) throws(DepotClientError) -> Stored? {
        do {
            return try pool.read { db -> Stored? in
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
                let objects = try String.fetchAll(
                    db, sql: "SELECT object FROM replica_object WHERE key = ?", arguments: [key]
                )
                .map { text in try DepotObject(json: JSONParser.parse(text)) }
                return Stored(layout: layout, transaction: row["transaction_number"], objects: objects)
            }
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    /// Replaces what the file holds under `key`, in one transaction (a crash keeps the old or the new).
    func save(key: String, _ stored: Stored) throws(DepotClientError) {
        let sections = JSONValue.array(
            stored.layout.sections.map { section in
                [
                    "name": .string(section.name), "indexTitle": .string(section.indexTitle),
                    "ids": .array(section.ids.map { .string($0) }),
                ]
            })
        do {
            try pool.write { db in
                try db.execute(
                    sql: """
                        INSERT OR REPLACE INTO replica_results (key, sections, seq, transaction_number)
                        VALUES (?, ?, ?, ?)
                        """,
                    arguments: [
                        key, String(decoding: JSONWriter.encode(sections), as: UTF8.self), stored.layout.seq,
                        stored.transaction,
                    ])
                try db.execute(sql: "DELETE FROM replica_object WHERE key = ?", arguments: [key])
                for object in stored.objects {
                    try db.execute(
                        sql: "INSERT INTO replica_object (key, id, object) VALUES (?, ?, ?)",
                        arguments: [key, object.id, String(decoding: JSONWriter.encode(object.json), as: UTF8.self)])
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
    /// as a reload; returns whether it held anything.
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
        guard let stored = try file.load(key: key) else { return false }
        state.withLock { state in
            state.layout = stored.layout
            state.subscription = nil
            state.transaction = stored.transaction
            state.entries = [:]
            for object in stored.objects { Self.store(object, in: &state, onlyIfNewer: false) }
            state.indexPaths = nil
        }
        await announceReload(layout: stored.layout, transaction: stored.transaction)
        return true
    }

    /// Writes the results as they are now to the persistent store, if there is one; a failure is
    /// kept in ``persistentStoreError`` (the results in memory are right, the file is behind).
    func persist() {
        let snapshot = state.withLock { state -> (ResultsReplicaFile, String, ResultsReplicaFile.Stored)? in
            guard let (file, key) = state.replica, let layout = state.layout, state.subscription != nil else {
                return nil
            }
            let objects = layout.ids.compactMap { state.entries[$0]?.raw }
            return (
                file, key,
                ResultsReplicaFile.Stored(layout: layout, transaction: state.transaction ?? 0, objects: objects)
            )
        }
        guard let (file, key, stored) = snapshot else { return }
        let failure: DepotClientError?
        do {
            try file.save(key: key, stored)
            failure = nil
        } catch {
            failure = error
        }
        state.withLock { $0.persistentStoreError = failure }
    }
}
