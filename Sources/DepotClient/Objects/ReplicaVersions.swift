import GRDB

/// The versions a client replica file records beside what it keeps (DESIGN.md §9): the format it
/// was written in, and the model version each part of it holds. Either differing from the
/// reader's means the part is fetched again (a resync), never read in a shape it was not written in.
///
/// One table, `replica_versions` (made by ``ReplicaFile``'s format 2), of named integers; the
/// results' and the context's files (which may be one file) each name their own rows. The file's
/// format itself is ``ReplicaFile``'s migrations.
enum ReplicaVersions {
    /// The integer recorded under `name`, if any.
    static func value(_ db: Database, _ name: String) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT value FROM replica_versions WHERE name = ?", arguments: [name])
    }

    /// Records `value` under `name`.
    static func set(_ db: Database, _ name: String, _ value: Int64) throws {
        try db.execute(
            sql: "INSERT OR REPLACE INTO replica_versions (name, value) VALUES (?, ?)", arguments: [name, value])
    }

    /// Forgets what is recorded under `name`.
    static func remove(_ db: Database, _ name: String) throws {
        try db.execute(sql: "DELETE FROM replica_versions WHERE name = ?", arguments: [name])
    }
}
