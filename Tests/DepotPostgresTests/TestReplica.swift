import DepotPostgres
import DepotStore
import Foundation
import GRDB

/// The set-up the cluster's tests share: a schema of their own on the shared server, replicas in
/// temporary files, and a replica's rows and checksum read back from its file.
enum TestReplica {
    /// The shared server's URL, with a new schema named after `prefix`.
    static func clusterURL(_ prefix: String) throws -> PostgresURL {
        var url = try PostgresServer.sharedOrFail().url
        url.schema = uniqueSchema(prefix)
        return url
    }

    /// A path for a new replica file.
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("depot-replica-\(UUID()).sqlite").path
    }

    /// A store on a new replica file that follows `replication`, and the file's path.
    static func open(_ replication: any StoreReplication) throws -> (Store, String) {
        let path = temporaryPath()
        return (try Store(path: path, replication: replication), path)
    }

    /// Every row of every object table of the replica at `path`, by table, in key order.
    static func objectTables(_ path: String) throws -> [String: [[String: DatabaseValue]]] {
        try reading(path) { db in
            var tables: [String: [[String: DatabaseValue]]] = [:]
            let names = try String.fetchAll(
                db,
                sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND (name GLOB 'e_*' OR name GLOB 'j_*')")
            for name in names {
                let order = name.hasPrefix("j_") ? "a, b" : "id"
                tables[name] = try Row.fetchAll(db, sql: "SELECT * FROM \"\(name)\" ORDER BY \(order)").map { row in
                    Dictionary(row.map { ($0, $1) }, uniquingKeysWith: { first, _ in first })
                }
            }
            return tables
        }
    }

    /// The checksum the replica at `path` recorded (``ReplicaChecksum``), with its offset from the
    /// log's, and the checksum of its rows read in full.
    static func checksums(_ path: String) throws -> (recorded: String?, offset: String?, full: String) {
        try reading(path) { db in
            (
                try String.fetchOne(db, sql: "SELECT value FROM depot_meta WHERE key = 'checksum'"),
                try String.fetchOne(db, sql: "SELECT value FROM depot_meta WHERE key = 'checksumOffset'"),
                String(try ReplicaChecksum.full(db))
            )
        }
    }

    /// Runs `body` on a read-only connection of its own to the replica at `path`.
    private static func reading<T>(_ path: String, _ body: (Database) throws -> T) throws -> T {
        var configuration = Configuration()
        configuration.readonly = true
        return try DatabaseQueue(path: path, configuration: configuration).read(body)
    }
}
