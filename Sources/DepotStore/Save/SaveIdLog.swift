import DepotProtocol
import GRDB

/// The `saveId`s of committed saves and their answers (DESIGN.md §6), in
/// `depot_save_id`: a save whose `saveId` is there is not applied again but
/// answered with the stored answer.
///
/// A save's row is written in the save's own transaction (its savepoint in a
/// group commit), so a save never commits without its id nor an id without
/// its save. Only saves that committed a transaction are recorded: a failed
/// save, or one that changed nothing, leaves nothing to remember. In a
/// cluster the table travels in the write's changeset like the object tables
/// (``ChangeSession``), so every replica knows every id; it is pruned with
/// history, by the writer only (``prune(_:)``), and the prune travels too.
enum SaveIdLog {
    /// The table's name (the changeset filters name it too).
    static let table = "depot_save_id"

    /// The longest `saveId`, in Unicode scalars (JSON Schema's `maxLength` counts the same).
    static let maximumLength = 128

    /// Creates the table if the store has none yet.
    static func createTable(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS depot_save_id (
                    save_id TEXT PRIMARY KEY NOT NULL,
                    transaction_id INTEGER NOT NULL,
                    answer TEXT NOT NULL);
                CREATE INDEX IF NOT EXISTS depot_save_id_transaction ON depot_save_id (transaction_id);
                """)
    }

    /// Refuses a `saveId` that is empty or longer than ``maximumLength``, naming `params.saveId`.
    static func validate(_ saveId: String) throws(RPCError) {
        let length = saveId.unicodeScalars.count
        guard length >= 1, length <= maximumLength else {
            throw RPCError.invalidParams(
                "saveId must be 1 to \(maximumLength) characters, got \(length): \(JSONValue.string(saveId).excerpt())",
                field: "params.saveId")
        }
    }

    /// The first answer of the committed save named `saveId`, if one committed and is still remembered.
    static func answer(_ db: Database, saveId: String) throws -> StoreSave.Result? {
        guard
            let text = try String.fetchOneCached(
                db, sql: "SELECT answer FROM depot_save_id WHERE save_id = ?", arguments: [saveId])
        else { return nil }
        return try JSONCoding.decode(StoreSave.Result.self, from: JSONParser.parse(text))
    }

    /// Remembers that the save named `saveId` committed with `answer` (inside its transaction).
    static func record(_ db: Database, saveId: String, answer: StoreSave.Result) throws {
        let text = String(decoding: try JSONCoding.encodeBytes(answer), as: UTF8.self)
        try db.executeCached(
            sql: "INSERT INTO depot_save_id (save_id, transaction_id, answer) VALUES (?, ?, ?)",
            arguments: [saveId, answer.transaction, text])
    }

    /// Forgets the ids of saves whose transactions history no longer holds.
    ///
    /// Called where history prunes on the writer (``HistoryLog``), never while a replica applies
    /// the cluster's log: there the writer's prune arrives in its changeset, so that every
    /// replica holds the same ids whatever its own retention.
    static func prune(_ db: Database) throws {
        try db.executeCached(
            sql: """
                DELETE FROM depot_save_id
                WHERE transaction_id < (SELECT IFNULL(MIN(id), 0) FROM depot_transaction)
                """)
    }
}
