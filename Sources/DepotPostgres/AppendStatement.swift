import PostgresNIO

/// The append of one log entry with its object-table rows and save ids (the common write), as a
/// prepared statement: postgres-nio prepares it once per connection, and PostgreSQL then skips
/// parsing and planning it on every save (the dynamic statement of ``PostgresReplication`` spent
/// about 0.2 ms of server time there per save).
///
/// Its text names no schema: the writer's connection resolves the log's tables and functions
/// through its `search_path`, set to the log's schema when it connects. It does what the dynamic
/// statement does for one entry: inserts it only if the log's newest entry is the one before and
/// no other writer holds the write lock, writes the rows, records or forgets the save ids, and
/// notifies, all in one statement that commits by itself.
///
/// The JSON parameters are typed `text` in the statement (`$n::text::jsonb`): postgres-nio
/// prepares it with the types of the first bindings, and a parameter first bound as NULL gets
/// the type PostgreSQL infers from its cast, `jsonb`, whose binary form a later `String`
/// binding is not (PostgreSQL then refuses it: "unsupported jsonb version number 91", the `[`).
struct AppendStatement: PostgresPreparedStatement {
    static let name = "depot_append_one"

    static let sql = """
        WITH entry AS (
            INSERT INTO change_log ("transaction", author, changes, changeset, checksum)
            SELECT $1::bigint, $2::text, $3::text::jsonb, $4::bytea, $5::bigint
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

    /// The entry's number, its author column (the node) and `changes` JSON.
    var number: Int64
    var node: String
    var changes: String
    /// The SQLite changeset, if any, and the checksum.
    var changeset: [UInt8]
    var checksum: Int64?
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

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 12)
        bindings.append(number)
        bindings.append(node)
        bindings.append(changes)
        if changeset.isEmpty { bindings.appendNull() } else { bindings.append(ByteBuffer(bytes: changeset)) }
        if let checksum { bindings.append(checksum) } else { bindings.appendNull() }
        bindings.append(locked)
        bindings.append(lockKey)
        for json in [rows, saved, forgotten] {
            if let json { bindings.append(json) } else { bindings.appendNull() }
        }
        bindings.append(channel)
        bindings.append(payload)
        return bindings
    }

    /// A row means the entry went in.
    func decodeRow(_ row: PostgresRow) throws -> Bool { true }
}
