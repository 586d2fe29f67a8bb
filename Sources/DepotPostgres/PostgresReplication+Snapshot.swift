import DepotStore
import PostgresNIO

/// A new replica's start: the cluster's objects at one position, read on the writer's connection.
extension PostgresReplication {
    /// The objects and the log position they reflect, read in one REPEATABLE READ transaction on
    /// the writer's connection: the header first, then each table through a cursor,
    /// ``snapshotBatch`` rows a round trip, in binary, handed to `rows` as they come. The next
    /// batch is asked for before `rows` stores the one at hand, so PostgreSQL reads while SQLite writes.
    public func readSnapshot(
        begin: (ReplicaSnapshot) throws -> Void, rows: (_ table: String, _ batch: ReplicaSnapshot.Batch) throws -> Void
    ) throws -> Bool {
        let connection = writer.connection
        let objectTables = writer.objectTables
        try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", wait: lockTimeout)
        var open = true
        // A failure of the writer's connection drops it, which ends the transaction; any other, this.
        defer { if open { connection.send("ROLLBACK") } }
        let header = try connection.run(wait: lockTimeout) { [objectTables, logger] connection in
            try await objectTables.snapshot(on: connection, logger: logger)
        }
        guard let (snapshot, tables) = header else {
            try connection.query("COMMIT")
            open = false
            return false
        }
        try begin(snapshot)
        let fetch = PostgresQuery(unsafeSQL: "FETCH \(snapshotBatch) FROM depot_snapshot")
        // The ids of committed saves last, loaded like a table of the replica's.
        for table in tables + [ReplicaSnapshot.saveIDsTable] {
            try connection.query(objectTables.snapshotCursor(table))
            var next = try connection.submit(fetch)
            while true {
                let fetched = try connection.wait(for: next, limit: lockTimeout)
                guard let batch = try PostgresObjectTables.batch(fetched) else { break }
                if fetched.count == snapshotBatch { next = try connection.submit(fetch) }
                try rows(table, batch)
                if fetched.count < snapshotBatch { break }
            }
            try connection.query("CLOSE depot_snapshot")
        }
        try connection.query("COMMIT")
        open = false
        return true
    }
}
