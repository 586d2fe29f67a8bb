import DepotProtocol
import DepotStore
import NIOCore
import PostgresNIO

/// The append of a write's log entries (one, or a group commit's several) with their object-table
/// rows and save ids, as one prepared statement whatever the number of entries: the entries go as
/// arrays (`unnest … WITH ORDINALITY` numbers them from the first), so postgres-nio prepares it once
/// per connection and PostgreSQL skips parsing and planning it on every write (a dynamic statement
/// spent about 0.2 ms of server time there per save).
///
/// Its text names no schema: the writer's connection resolves the log's tables and functions
/// through its `search_path`, set to the log's schema when it connects. It inserts the entries only
/// if the log's newest entry is the one before the first and no other writer holds the write lock,
/// writes the rows, records or forgets the save ids, and notifies, all in one statement that commits
/// by itself (or, for a model change, in the transaction that rebuilds the object tables). A number
/// taken meanwhile by another daemon fails the whole statement (the log's primary key): all of a
/// group or none of it.
///
/// Arrays carry no NULLs here: an entry without a changeset has an empty one, one without a
/// checksum an empty text, both read back as NULL. The JSON parameters are typed `text` in the
/// statement (`$n::text::jsonb`): postgres-nio prepares it with the types of the first bindings,
/// and a parameter first bound as NULL gets the type PostgreSQL infers from its cast, `jsonb`,
/// whose binary form a later `String` binding is not (PostgreSQL then refuses it: "unsupported
/// jsonb version number 91", the `[`).
struct AppendStatement: PostgresPreparedStatement {
    static let name = "depot_append"

    static let sql = """
        WITH entry AS (
            INSERT INTO change_log ("transaction", author, changes, changeset, checksum)
            SELECT $1::bigint + e.n - 1, $2::text, e.changes::jsonb, nullif(e.changeset, ''::bytea),
                nullif(e.checksum, '')::bigint
            FROM unnest($3::text[], $4::bytea[], $5::text[]) WITH ORDINALITY AS e(changes, changeset, checksum, n)
            WHERE (SELECT coalesce(max("transaction"), 0) FROM change_log) = $1::bigint - 1
                AND ($6::boolean OR pg_try_advisory_xact_lock($7::bigint))
            RETURNING "transaction"),
        mirrored AS (
            SELECT depot_write_rows($8::text::jsonb) AS written
            WHERE $8::text::jsonb IS NOT NULL AND EXISTS (SELECT 1 FROM entry)),
        saved AS (
            INSERT INTO save_ids (save_id, transaction_id, answer)
            SELECT r->>'save_id', (r->>'transaction_id')::bigint, r->>'answer'
            FROM jsonb_array_elements(coalesce($9::text::jsonb->0->'written', '[]'::jsonb)) r
            WHERE EXISTS (SELECT 1 FROM entry)
            ON CONFLICT (save_id) DO UPDATE SET transaction_id = excluded.transaction_id, answer = excluded.answer),
        forgotten AS (
            DELETE FROM save_ids
            WHERE save_id IN (SELECT jsonb_array_elements_text(coalesce($10::text::jsonb, '[]'::jsonb)))
                AND EXISTS (SELECT 1 FROM entry))
        SELECT pg_notify($11::text, $12::text)::text, (SELECT count(*) FROM mirrored)
        FROM entry HAVING count(*) > 0
        """

    /// The first entry's number (the others follow it) and the author column (the node).
    var first: Int64
    var node: String
    /// Each entry's `changes` JSON, SQLite changeset (empty: none) and checksum (empty: none).
    var changes: [String]
    var changesets: [ByteBuffer]
    var checksums: [String]
    /// Whether the writer holds the write lock, and the lock's key.
    var locked: Bool
    var lockKey: Int64
    /// The rows for `depot_write_rows`, the save ids written and forgotten (JSON), when there are any.
    var rows: String?
    var saved: String?
    var forgotten: String?
    /// The NOTIFY channel and payload.
    var channel: String
    var payload: String

    /// The append of `entries` (consecutive numbers, at least one) by `node` to `log`, with the
    /// rows `tables` says the write left (its save ids only, for a model change: the tables are
    /// rebuilt beside it).
    init(entries: [ReplicatedEntry], node: String, tables: ObjectTablesChange?, locked: Bool, log: ChangeLog) {
        first = entries.first?.number ?? 1
        self.node = node
        changes = entries.map { String(decoding: JSONWriter.encode(PostgresReplication.encode($0)), as: UTF8.self) }
        changesets = entries.map { entry in
            if case .data(_, _, let changeset, _) = entry.content { ByteBuffer(bytes: changeset) } else { ByteBuffer() }
        }
        checksums = entries.map { $0.checksum.map(String.init) ?? "" }
        self.locked = locked
        lockKey = log.lockKey
        let changedTables = tables?.model == nil ? tables?.tables ?? [] : []
        rows = changedTables.isEmpty ? nil : PostgresObjectTables.json(changedTables)
        let savedIDs = tables?.savedIDs ?? []
        let forgottenIDs = tables?.forgottenIDs ?? []
        // The ids of saves, as one table's written rows (values as PostgreSQL reads them from JSON).
        saved =
            savedIDs.isEmpty
            ? nil : PostgresObjectTables.json([ObjectTablesChange.Table(name: "", written: savedIDs, deleted: [])])
        forgotten =
            forgottenIDs.isEmpty
            ? nil : String(decoding: JSONWriter.encode(.array(forgottenIDs.map(JSONValue.string))), as: UTF8.self)
        channel = log.channel
        // The hint carries the entries when they fit: another daemon applies them without reading the log.
        payload = LogHint.payload(for: entries, changes: changes, node: node)
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 12)
        bindings.append(first)
        bindings.append(node)
        bindings.append(changes)
        bindings.append(changesets)
        bindings.append(checksums)
        bindings.append(locked)
        bindings.append(lockKey)
        for json in [rows, saved, forgotten] {
            if let json { bindings.append(json) } else { bindings.appendNull() }
        }
        bindings.append(channel)
        bindings.append(payload)
        return bindings
    }

    /// A row means the entries went in.
    func decodeRow(_ row: PostgresRow) throws -> Bool { true }
}
