import GRDB

/// The versions a client replica file records beside what it keeps (DESIGN.md §9): the format it
/// was written in, and the model version each part of it holds. Either differing from the
/// reader's means the part is fetched again (a resync), never read in a shape it was not written in.
///
/// One table, `replica_meta`, of named integers; the results' and the context's files (which may
/// be one file) each name their own rows.
enum ReplicaVersions {
    /// Creates the table, and returns whether `name`'s recorded format differs from `format`
    /// (a file written before formats were recorded has none): the caller then drops what it
    /// kept and records `format`.
    static func formatChanged(_ db: Database, name: String, format: Int64) throws -> Bool {
        try db.execute(
            sql: "CREATE TABLE IF NOT EXISTS replica_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL)")
        guard try value(db, name) != format else { return false }
        try set(db, name, format)
        return true
    }

    /// The integer recorded under `name`, if any.
    static func value(_ db: Database, _ name: String) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT value FROM replica_meta WHERE name = ?", arguments: [name])
    }

    /// Records `value` under `name`.
    static func set(_ db: Database, _ name: String, _ value: Int64) throws {
        try db.execute(
            sql: "INSERT OR REPLACE INTO replica_meta (name, value) VALUES (?, ?)", arguments: [name, value])
    }

    /// Forgets what is recorded under `name`.
    static func remove(_ db: Database, _ name: String) throws {
        try db.execute(sql: "DELETE FROM replica_meta WHERE name = ?", arguments: [name])
    }
}
