import DepotProtocol
import DepotStore
import Foundation
import GRDB
import Logging
import PostgresNIO

/// The cluster's objects as PostgreSQL tables (DESIGN.md section 11): one table per entity and
/// one per many-to-many relationship, laid out by ``PostgresStoreSchema`` in the log's schema,
/// written with the log entry that changed them, in the same statement or transaction.
///
/// A data entry's rows go through `depot_write_rows(jsonb)`, a plpgsql function called in the
/// append's own statement: rows inserted or updated are written whole (an upsert on the key),
/// rows deleted are deleted by key. A model change rebuilds every table from the committing
/// replica's rows, in the append's transaction, and records the model in `object_model`. The
/// function writes nothing until that table exists: a cluster whose log began before the tables
/// existed gets them at its next model change (docs/cluster.md).
struct PostgresObjectTables: Sendable {
    /// The log whose schema holds the tables.
    let log: ChangeLog

    /// The table that records the model the object tables follow (one row).
    var modelTable: String { "\"\(log.schema)\".object_model" }

    /// The table that records, for each entity table, the highest id it ever gave.
    var idsTable: String { "\"\(log.schema)\".object_ids" }

    /// The function that writes a data entry's rows.
    var writeFunction: String { "\"\(log.schema)\".depot_write_rows" }

    /// Creates (or replaces) ``writeFunction``.
    var functionStatement: String {
        let schema = log.schema
        return """
            CREATE OR REPLACE FUNCTION \(writeFunction) (changes jsonb) RETURNS bigint
            LANGUAGE plpgsql VOLATILE AS $$
            DECLARE
                change jsonb;
                name text;
                assignments text;
                written bigint := 0;
            BEGIN
                IF to_regclass('\(modelTable)') IS NULL THEN RETURN 0; END IF;
                FOR change IN SELECT * FROM jsonb_array_elements(changes) LOOP
                    name := change->>'table';
                    IF to_regclass(format('%I.%I', '\(schema)', name)) IS NULL THEN
                        RAISE EXCEPTION 'the cluster''s object table % is missing', name;
                    END IF;
                    IF name LIKE 'j\\_%' THEN
                        EXECUTE format('DELETE FROM %I.%I d USING jsonb_array_elements($1) k '
                            'WHERE d.a = (k->>0)::bigint AND d.b = (k->>1)::bigint', '\(schema)', name)
                            USING change->'deleted';
                        EXECUTE format('INSERT INTO %I.%I (a, b) SELECT (r->>''a'')::bigint, (r->>''b'')::bigint '
                            'FROM jsonb_array_elements($1) r ON CONFLICT DO NOTHING', '\(schema)', name)
                            USING change->'written';
                    ELSE
                        EXECUTE format('DELETE FROM %I.%I d USING jsonb_array_elements($1) k '
                            'WHERE d.id = (k->>0)::bigint', '\(schema)', name)
                            USING change->'deleted';
                        SELECT string_agg(format('%I = excluded.%I', attname, attname), ', ') INTO assignments
                            FROM pg_attribute
                            WHERE attrelid = format('%I.%I', '\(schema)', name)::regclass
                                AND attnum > 0 AND NOT attisdropped AND attname <> 'id';
                        EXECUTE format('INSERT INTO %I.%I SELECT * FROM jsonb_populate_recordset(NULL::%I.%I, $1) '
                            'ON CONFLICT (id) DO UPDATE SET %s', '\(schema)', name, '\(schema)', name, assignments)
                            USING change->'written';
                        INSERT INTO \(idsTable) AS ids (entity_table, highest)
                            SELECT name, max((r->>'id')::bigint) FROM jsonb_array_elements(change->'written') r
                            HAVING count(*) > 0
                            ON CONFLICT (entity_table) DO UPDATE SET highest = greatest(ids.highest, excluded.highest);
                    END IF;
                    written := written + jsonb_array_length(change->'written') + jsonb_array_length(change->'deleted');
                END LOOP;
                RETURN written;
            END
            $$
            """
    }

    /// `tables` as ``writeFunction`` reads them.
    static func json(_ tables: [ObjectTablesChange.Table]) -> String {
        let value = JSONValue.array(
            tables.map { table in
                .object([
                    "table": .string(table.name),
                    "written": .array(table.written.map { row in .object(row.mapValues(Self.json)) }),
                    "deleted": .array(table.deleted.map { key in .array(key.map(JSONValue.int)) }),
                ])
            })
        return String(decoding: JSONWriter.encode(value), as: UTF8.self)
    }

    /// A stored value as PostgreSQL's input of the column reads it from JSON: `bytea` as `\x…` hex.
    private static func json(_ value: DatabaseValue) -> JSONValue {
        switch value.storage {
        case .null: .null
        case .int64(let number): .int(number)
        case .double(let number): .double(number)
        case .string(let text): .string(text)
        case .blob(let data): .string("\\x" + data.map { String(format: "%02x", $0) }.joined())
        }
    }

    /// Drops the object tables, creates those of `change`'s model and fills them, records the
    /// model, inside the caller's open transaction on `connection`.
    func rebuild(_ change: ObjectTablesChange, on connection: PostgresConnection, logger: Logger) async throws {
        guard let model = change.model else { return }
        let tables = try PostgresStoreSchema(name: log.schema, model: model)
        for name in try await tableNames(on: connection, logger: logger) {
            try await connection.query(
                PostgresQuery(unsafeSQL: "DROP TABLE \"\(log.schema)\".\(EntitySchema.quote(name))"), logger: logger)
        }
        for statement in tables.statements {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS \(unescaped: modelTable) (
                id int PRIMARY KEY CHECK (id = 1),
                version bigint NOT NULL,
                entities jsonb NOT NULL
            )
            """, logger: logger)
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS \(unescaped: idsTable) (entity_table text PRIMARY KEY, highest bigint NOT NULL)
            """, logger: logger)
        try await connection.query("DELETE FROM \(unescaped: idsTable)", logger: logger)
        for (table, highest) in change.highestIDs {
            try await connection.query(
                "INSERT INTO \(unescaped: idsTable) (entity_table, highest) VALUES (\(table), \(highest))",
                logger: logger)
        }
        let entities = String(decoding: JSONWriter.encode(try JSONCoding.encode(model.descriptions)), as: UTF8.self)
        try await connection.query(
            """
            INSERT INTO \(unescaped: modelTable) (id, version, entities) VALUES (1, \(model.version), \(entities)::jsonb)
            ON CONFLICT (id) DO UPDATE SET version = excluded.version, entities = excluded.entities
            """, logger: logger)
        for table in change.tables {
            for start in stride(from: 0, to: max(table.written.count, 1), by: 10_000) {
                let chunk = ObjectTablesChange.Table(
                    name: table.name, written: Array(table.written[start..<min(start + 10_000, table.written.count)]),
                    deleted: [])
                try await connection.query(
                    "SELECT \(unescaped: writeFunction)(\(Self.json([chunk]))::jsonb)", logger: logger)
            }
        }
    }

    /// Where the objects are at the log's head, read inside the caller's open REPEATABLE READ
    /// transaction on `connection` (one snapshot): the position, model, ids and checksum (no rows),
    /// and the object tables to read the rows from (``snapshotCursor(_:)``, in the same
    /// transaction); nil when the cluster keeps no tables or its log is empty.
    func snapshot(on connection: PostgresConnection, logger: Logger) async throws -> (ReplicaSnapshot, [String])? {
        let kept = try await connection.query("SELECT to_regclass(\(modelTable))::text", logger: logger)
            .collect().first?.decode(String?.self)
        guard kept != nil else { return nil }
        let position = try await log.lastTransaction(on: connection, logger: logger)
        guard position > 0 else { return nil }
        let transaction =
            try await connection.query(
                """
                SELECT (changes->>'transaction')::bigint FROM \(unescaped: log.log)
                WHERE "transaction" <= \(position) AND changes->>'transaction' IS NOT NULL
                ORDER BY "transaction" DESC LIMIT 1
                """, logger: logger
            ).collect().first?.decode(Int64.self) ?? 0
        guard
            let (version, entitiesJSON) = try await connection.query(
                "SELECT version, entities::text FROM \(unescaped: modelTable)", logger: logger
            ).collect().first?.decode((Int64, String).self)
        else { return nil }
        let entities = try JSONCoding.decode([EntityDescription].self, from: try JSONParser.parse(entitiesJSON))
        var highestIDs: [String: Int64] = [:]
        for try await (table, highest) in try await connection.query(
            "SELECT entity_table, highest FROM \(unescaped: idsTable)", logger: logger
        ).decode((String, Int64).self) {
            highestIDs[table] = highest
        }
        let checksum = try await connection.query(
            "SELECT checksum FROM \(unescaped: log.log) WHERE \"transaction\" = \(position)", logger: logger
        ).collect().first?.decode(Int64?.self)
        let snapshot = ReplicaSnapshot(
            position: position, transaction: transaction, version: version, entities: entities,
            highestIDs: highestIDs, checksum: checksum ?? nil)
        return (snapshot, try await tableNames(on: connection, logger: logger))
    }

    /// Declares the cursor `depot_snapshot` over every row of object table `name`, every column
    /// (`depot_save_id`: of ``ChangeLog/saveIDs``); its rows come in binary, ``storedValue(_:)`` reads them.
    func snapshotCursor(_ name: String) -> PostgresQuery {
        let table = name == ReplicaSnapshot.saveIDsTable ? log.saveIDs : "\"\(log.schema)\".\(EntitySchema.quote(name))"
        return PostgresQuery(unsafeSQL: "DECLARE depot_snapshot NO SCROLL CURSOR FOR SELECT * FROM \(table)")
    }

    /// The rows of one FETCH from ``snapshotCursor(_:)`` as a snapshot's batch: each value as the
    /// store stores one of its column (booleans as 0 and 1, `bytea` as a blob); nil for no rows.
    static func batch(_ rows: [PostgresRow]) throws -> ReplicaSnapshot.Batch? {
        guard let first = rows.first else { return nil }
        let columns = first.map(\.columnName)
        var values: [DatabaseValue] = []
        values.reserveCapacity(rows.count * columns.count)
        for row in rows {
            for cell in row { values.append(try storedValue(cell)) }
        }
        return ReplicaSnapshot.Batch(columns: columns, values: values)
    }

    /// One cell of a table ``PostgresStoreSchema`` lays out, as the store stores its value.
    static func storedValue(_ cell: PostgresCell) throws -> DatabaseValue {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int8, .int4, .int2: return try cell.decode(Int64.self).databaseValue
        case .float8, .float4: return try cell.decode(Double.self).databaseValue
        case .bool: return (try cell.decode(Bool.self) ? 1 : 0).databaseValue
        case .bytea:
            var buffer = cell.bytes!
            return Data(buffer.readBytes(length: buffer.readableBytes) ?? []).databaseValue
        default: return try cell.decode(String.self).databaseValue
        }
    }

    /// The names of the object tables in the log's schema.
    private func tableNames(on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        try await connection.query(
            """
            SELECT tablename FROM pg_tables
            WHERE schemaname = \(log.schema) AND (tablename LIKE 'e\\_%' OR tablename LIKE 'j\\_%')
            """, logger: logger
        ).collect().map { try $0.decode(String.self) }
    }
}
