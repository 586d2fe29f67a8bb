import DepotProtocol
import Foundation
import GRDB

/// The format version of a store file, recorded in its `PRAGMA user_version`
/// (DESIGN.md §12 "Upgrades").
///
/// A file from before the record (user_version 0 with Depot's tables in it)
/// is format 1. Opening a file of an older format upgrades it, in the
/// opening transaction, through each step in ``upgrades``; a newer format is
/// refused before anything else is read or written.
enum StoreFormat {
    /// The format this build writes.
    static let current = 2

    /// The steps that bring format `n` to `n + 1`, by `n`.
    ///
    /// - 1 → 2: the version is recorded (format 1 is the same tables without the record).
    static let upgrades: [Int: @Sendable (Database) throws -> Void] = [
        1: { _ in }
    ]

    /// Refuses the file at `path`, if it exists, when its format is newer than ``current``, reading
    /// it read-only: opening the pool would write to it (WAL set-up) before ``prepare(_:path:)``.
    static func refuseNewer(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else { return }
        var configuration = Configuration()
        configuration.readonly = true
        let recorded = try DatabaseQueue(path: path, configuration: configuration).read { db in
            try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        }
        if recorded > current { throw newer(recorded, path: path) }
    }

    private static func newer(_ recorded: Int, path: String) -> RPCError {
        RPCError.internalError(
            "the store \(path) is in data format \(recorded), newer than format \(current) that this depotd reads: run the depotd release that wrote it (or a newer one), or restore a backup made before the upgrade"
        )
    }

    /// Checks the format of the store open in `db` (inside the opening write
    /// transaction), upgrades an older one and records ``current``.
    ///
    /// - Returns: the format it upgraded from, `nil` for a new or current file.
    /// - Throws: an error naming both versions when the file is newer than this build.
    static func prepare(_ db: Database, path: String) throws -> Int? {
        let recorded = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        if recorded > current { throw newer(recorded, path: path) }
        let isNew = try !db.tableExists("depot_meta")
        let found = isNew ? current : max(recorded, 1)
        for version in found..<current {
            guard let step = upgrades[version] else {
                throw RPCError.internalError("no upgrade from data format \(version) of the store \(path)")
            }
            try step(db)
        }
        if recorded != current { try db.execute(sql: "PRAGMA user_version = \(current)") }
        return found < current ? found : nil
    }
}

extension Store {
    /// The data format this build reads and writes (``StoreFormat``).
    public static var dataFormat: Int { StoreFormat.current }
}
