import DepotProtocol
import Foundation
import GRDB

/// A copy of the store written by ``Store/backup(into:pagesPerStep:progress:)``.
public struct StoreBackup: Sendable, Hashable {
    /// The transaction the copy is as of: its history ends there.
    public var transaction: Int64
    /// The copy's store file, `<destination>/depot.sqlite`.
    public var path: String
    /// Its size in bytes.
    public var sizeBytes: Int64
}

extension Store {
    /// The name of the store file in a data directory.
    public static let fileName = "depot.sqlite"

    /// Writes a consistent copy of the whole store (objects, model, history,
    /// save ids) into the directory `destination`, as `depot.sqlite`, as of the
    /// transaction it returns, while writes go on (DESIGN.md §12).
    ///
    /// The copy is read in one read transaction on a reader, so it is the
    /// state of one commit; in WAL mode that read never holds the writer, and
    /// the copy goes `pagesPerStep` pages at a time so that `progress` (pages
    /// copied, pages in all) can stop it between steps by throwing. The pages
    /// go to a hidden file in `destination` that is renamed to `depot.sqlite`
    /// only once complete and synced: a copy cut short (an error, a cancel, a
    /// killed daemon) is never a store a daemon would open. A partial copy
    /// left by a killed daemon (not written for a minute) is removed by the
    /// next backup into the same directory.
    ///
    /// - Throws: -32602 naming `destination` when it is not an absolute path,
    ///   is not a directory or already holds a store; -32600 on a store that
    ///   replicates a PostgreSQL cluster (back up the cluster with `pg_dump`).
    public func backup(
        into destination: String, pagesPerStep: Int32 = 512,
        progress: (_ copied: Int64, _ total: Int64) throws(RPCError) -> Void
    ) throws(RPCError) -> StoreBackup {
        precondition(snapshot == nil, "a snapshot store is not backed up")
        if replication != nil {
            throw RPCError(
                code: .invalidRequest,
                message:
                    "this daemon's store is a replica of a PostgreSQL cluster: back up the cluster's database with pg_dump, then restore it and start daemons on it (docs/cluster.md, \"Backup and restore\")"
            )
        }
        let directory = try Self.backupDirectory(destination)
        Self.removeAbandonedPartials(in: directory)
        let finalPath = directory.appendingPathComponent(Self.fileName).path
        let partialPath = directory.appendingPathComponent(Self.partialPrefix + UUID().uuidString).path
        defer {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: partialPath + suffix)
            }
        }
        let transaction = try Self.mapErrors {
            try withoutActuallyEscaping(progress) { progress in
                let copy = try DatabaseQueue(path: partialPath)
                defer { try? copy.close() }
                return try pool.read { source in
                    // The read transaction's snapshot: the copy and this number are of the same commit.
                    let transaction = try Self.latestTransaction(source)
                    try copy.writeWithoutTransaction { target in
                        try source.backup(to: target, pagesPerStep: pagesPerStep) { step in
                            let total = Int64(step.totalPageCount)
                            try progress(total - Int64(step.remainingPageCount), total)
                        }
                    }
                    return transaction
                }
            }
        }
        guard !FileManager.default.fileExists(atPath: finalPath) else {
            throw .invalidParams(
                "the destination \(destination) got a store (\(Self.fileName)) while the backup ran: choose an empty directory",
                field: "destination")
        }
        // The copy's commit synced its pages; the rename makes it whole at once, then the directory is synced.
        guard rename(partialPath, finalPath) == 0 else {
            throw .internalError("could not move the backup into \(finalPath): \(String(cString: strerror(errno)))")
        }
        let descriptor = open(directory.path, O_RDONLY | O_DIRECTORY)
        if descriptor >= 0 {
            _ = fsync(descriptor)
            close(descriptor)
        }
        let size = ((try? FileManager.default.attributesOfItem(atPath: finalPath))?[.size] as? NSNumber)?.int64Value
        return StoreBackup(transaction: transaction, path: finalPath, sizeBytes: size ?? 0)
    }

    /// How a backup's hidden partial copy is named, before a unique suffix.
    private static let partialPrefix = ".\(fileName).partial-"

    /// Removes the partial copies in `directory` that no backup has written to for a minute: those
    /// of a backup whose daemon died (a running backup writes its copy step after step).
    private static func removeAbandonedPartials(in directory: URL) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        let abandoned = Date().addingTimeInterval(-60)
        for name in names where name.hasPrefix(partialPrefix) {
            let path = directory.appendingPathComponent(name).path
            guard let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date,
                modified < abandoned
            else { continue }
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    /// `destination` as a directory to write a backup into: made if missing, refused if it holds a store.
    private static func backupDirectory(_ destination: String) throws(RPCError) -> URL {
        guard destination.hasPrefix("/") else {
            throw .invalidParams(
                "the destination \"\(destination)\" is not an absolute path: give the directory's full path on the daemon's host",
                field: "destination")
        }
        let directory = URL(fileURLWithPath: destination, isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw .invalidParams(
                "the destination \(destination) is not a directory the daemon can write: \(error.localizedDescription)",
                field: "destination")
        }
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent(fileName).path) {
            throw .invalidParams(
                "the destination \(destination) already holds a store (\(fileName)): choose an empty directory",
                field: "destination")
        }
        return directory
    }
}
