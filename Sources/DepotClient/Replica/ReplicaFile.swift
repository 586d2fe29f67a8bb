import DepotProtocol
import Foundation
import GRDB

/// The client's local SQLite file (DESIGN.md §9): one versioned schema, one set of pragmas, for
/// the fetched-results controllers (``ResultsReplicaFile``), the object contexts
/// (``ContextReplicaFile``) and the offline save queue (``OfflineSaveQueue``), which may share a file.
///
/// The schema is a GRDB `DatabaseMigrator`; `replica_meta` records the file's format version and
/// the model version it holds (`modelVersion`, `NULL` until known). A file made by a release
/// before the record (its tables made with `CREATE TABLE IF NOT EXISTS`) migrates to the current
/// format when opened; a file of a newer format than this build reads is refused, never misread.
enum ReplicaFile {
    /// The format this build writes (the number of migrations).
    static let formatVersion = 2

    /// Opens (creating or migrating if needed) the file at `url`.
    ///
    /// - Throws: ``DepotClientError/persistentStore(_:)`` when it cannot be opened, or is of a
    ///   newer format.
    static func open(_ url: URL) throws(DepotClientError) -> DatabasePool {
        let pool: DatabasePool
        do {
            var configuration = Configuration()
            // Several controllers and contexts, each with its own pool, may write one file.
            configuration.busyMode = .timeout(10)
            // A queued save survives a crash or a power cut once its write returns.
            configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            pool = try DatabasePool(path: url.path, configuration: configuration)
        } catch {
            throw .persistentStore("cannot open the persistent store at \(url.path): \(error)")
        }
        do {
            let (superseded, recorded) = try pool.read { db -> (Bool, Int?) in
                guard try migrator.hasBeenSuperseded(db) else { return (false, nil) }
                return (true, try db.tableExists("replica_meta") ? recordedFormat(db) : nil)
            }
            if superseded {
                throw DepotClientError.persistentStore(
                    "the persistent store at \(url.path) is in replica format \(recorded.map(String.init) ?? "?"), newer than format \(formatVersion) that this DepotClient reads: open it with the release that wrote it, or use another file"
                )
            }
        } catch let error as DepotClientError {
            throw error
        } catch {
            throw .persistentStore("cannot read the persistent store at \(url.path): \(error)")
        }
        do {
            do {
                try migrator.migrate(pool)
            } catch {
                // Another pool on the file migrated it meanwhile: what is left is nothing, or a retry.
                try migrator.migrate(pool)
            }
        } catch {
            throw .persistentStore("cannot upgrade the persistent store at \(url.path): \(error)")
        }
        return pool
    }

    /// The schema, migration by migration; never change a migration once released, add one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        // Format 1: the tables of every release before the format was recorded.
        migrator.registerMigration("1") { db in
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
        }
        // Format 2: the format and the model version recorded (the file's, and each kept result's: ReplicaVersions).
        migrator.registerMigration("2") { db in
            try db.execute(
                sql: """
                    CREATE TABLE replica_meta (
                        singleton INTEGER PRIMARY KEY CHECK (singleton = 0),
                        formatVersion INTEGER NOT NULL,
                        modelVersion INTEGER);
                    INSERT INTO replica_meta (singleton, formatVersion, modelVersion) VALUES (0, 2, NULL);
                    CREATE TABLE replica_versions (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
                    """)
        }
        return migrator
    }

    /// The file's recorded format version.
    static func recordedFormat(_ db: Database) throws -> Int? {
        try Int.fetchOne(db, sql: "SELECT formatVersion FROM replica_meta")
    }

    /// The model version the file's contents were read under, `nil` until recorded.
    static func modelVersion(_ db: Database) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT modelVersion FROM replica_meta")
    }

    /// Records the model version the file's contents are read under.
    static func setModelVersion(_ db: Database, _ version: Int64?) throws {
        try db.execute(sql: "UPDATE replica_meta SET modelVersion = ?", arguments: [version])
    }
}

extension DatabasePool {
    /// `body` in a read of a replica file, a failure thrown as ``DepotClientError/persistentStore(_:)``.
    func readReplica<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        do {
            return try read(body)
        } catch {
            throw .persistentStore("cannot read the persistent store: \(error)")
        }
    }

    /// `body` in a write of a replica file, a failure thrown as ``DepotClientError/persistentStore(_:)``.
    func writeReplica<T>(_ body: (Database) throws -> T) throws(DepotClientError) -> T {
        do {
            return try write(body)
        } catch {
            throw .persistentStore("cannot write the persistent store: \(error)")
        }
    }
}
