import DepotClient
import DepotProtocol
import Foundation
import GRDBSQLite

/// The seed scenario's Item table, and a fast way to fill it for benchmarks.
enum ItemSeed {
    static let entity = EntityDescription(
        name: "Item",
        attributes: [
            AttributeDescription(name: "name", type: .string),
            AttributeDescription(name: "createdAt", type: .date, indexed: true),
            AttributeDescription(name: "done", type: .boolean, defaultValue: false),
        ])

    /// `createdAt` of item `index` (1-based), in seconds since 1970.
    static func createdAt(_ index: Int) -> Double { 1_700_000_000 + Double(index) * 0.5 }

    /// An Item to insert through `store/save`, named `name`, created at `createdAt(index)`.
    static func object(_ name: String, index: Int) -> InsertedObject {
        InsertedObject(
            entity: "Item",
            values: ["name": .string(name), "createdAt": .string(ISO8601Text.string(seconds: createdAt(index)))])
    }

    /// Inserts `rows` Items through `store/save`, 20,000 per save (a load the daemon does itself,
    /// where the file cannot be written directly: a replica's rows must go through the cluster's log).
    static func save(_ rows: Int, through writer: DepotConnection) async throws {
        var loaded = 0
        while loaded < rows {
            let count = min(20_000, rows - loaded)
            let objects = (loaded..<loaded + count).map { object("item \($0)", index: $0) }
            _ = try await writer.call(StoreSave.self, .init(inserted: objects), timeout: .seconds(600))
            loaded += count
        }
    }

    /// Defines the model through the daemon, then writes `count` Items straight into its
    /// database file with prepared inserts in one transaction (the daemon reads them like any
    /// committed rows). Setup only: nothing here is measured.
    static func load(_ count: Int, into daemon: DaemonProcess, connection: DepotConnection) async throws {
        _ = try await connection.call(ModelDefine.self, .init(entities: [entity]))
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        try daemon.insertDirectly(
            count, with: #"INSERT INTO "e_Item" (id, _version, "name", "createdAt", "done") VALUES (?, 1, ?, ?, 0)"#
        ) { statement, index in
            sqlite3_bind_int64(statement, 1, Int64(index))
            sqlite3_bind_text(statement, 2, "item \(index)", -1, transient)
            sqlite3_bind_double(statement, 3, createdAt(index))
        }
    }
}
