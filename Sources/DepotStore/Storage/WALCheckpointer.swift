import Dispatch
import GRDB
import GRDBSQLite
import Synchronization

/// Writes the write-ahead log back into the database file off the writer's path.
///
/// SQLite checkpoints in the connection whose commit takes the WAL past 1,000 pages: that commit
/// then copies the pages back and syncs the log and the file, several milliseconds on a virtual
/// disk, and its save's answer waits for them (about one save in a few hundred: the save's p99).
/// Here the writer does not checkpoint. SQLite's WAL hook tells, after each commit, how many pages
/// the log holds; past ``threshold`` a checkpoint runs on a connection and a queue of its own, in
/// `PASSIVE` mode: it waits for no writer or reader and holds none up, and copies back what no
/// reader still needs. Once every frame is copied back, the writer's next transaction starts the
/// log over from its beginning (SQLite's own rule), so the log stays about as large as before.
///
/// Under writes without a pause, frames committed while a checkpoint runs keep the log from
/// starting over; past ``limit`` the writer checkpoints itself, as SQLite would (`PASSIVE`), so
/// the log stays bounded under any load: a sustained writer pays one checkpoint per ``limit``
/// pages instead of one per ``threshold``.
final class WALCheckpointer: Sendable {
    /// The log's size, in pages, past which a checkpoint is started (SQLite's own default).
    static let threshold: Int32 = 1000
    /// The log's size, in pages, past which the writer checkpoints itself.
    static let limit: Int32 = 4 * threshold

    private let path: String
    private let queue = DispatchQueue(label: "depot.checkpoint", qos: .utility)
    /// The checkpoint's own connection, opened on first use (touched on `queue` only).
    private let connection = Mutex<OpaquePointer?>(nil)
    /// Whether a checkpoint is queued or running: commits meanwhile queue no other.
    private let queued = Atomic<Bool>(false)
    /// The log's size at which the next checkpoint starts (written by the writer's hook only): one
    /// ``threshold`` further after each, so that writes without a pause, which keep the log from
    /// starting over, get one checkpoint per ``threshold`` pages, not one per commit.
    private let trigger = Atomic<Int32>(threshold)
    /// Checkpoints run (off the writer, and by the writer past ``limit``), and those that could not
    /// copy the whole log back (a reader or the writer still used it).
    private let runs = Atomic<Int>(0)
    private let byWriter = Atomic<Int>(0)
    private let partial = Atomic<Int>(0)

    /// A checkpointer for the database at `path`.
    init(path: String) {
        self.path = path
    }

    deinit {
        connection.withLock { connection in
            if let open = connection { sqlite3_close_v2(open) }
        }
    }

    /// Takes over the checkpoints of the writer connection `db`: its automatic checkpoint is off
    /// and its commits report the log's size here. Call it once, as the connection opens.
    func install(on db: Database) throws {
        try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
        guard let handle = db.sqliteConnection else { return }
        // The hook holds no reference: the store owns both this checkpointer and the connection.
        sqlite3_wal_hook(
            handle,
            { context, writer, _, pages in
                let checkpointer = Unmanaged<WALCheckpointer>.fromOpaque(context!).takeUnretainedValue()
                if pages >= WALCheckpointer.limit {
                    // In the hook, as SQLite's own automatic checkpoint does it; the log then starts over.
                    checkpointer.byWriter.add(1, ordering: .relaxed)
                    checkpointer.checkpoint(on: writer)
                    checkpointer.trigger.store(WALCheckpointer.threshold, ordering: .relaxed)
                } else {
                    checkpointer.logDidGrow(to: pages)
                }
                return SQLITE_OK
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// How many checkpoints ran, how many of them the writer ran, and how many left part of the
    /// log (for tests and figures).
    var figures: (runs: Int, byWriter: Int, partial: Int) {
        (runs.load(ordering: .relaxed), byWriter.load(ordering: .relaxed), partial.load(ordering: .relaxed))
    }

    /// A commit left `pages` pages in the log (on the writer, right after the commit).
    private func logDidGrow(to pages: Int32) {
        var next = trigger.load(ordering: .relaxed)
        // The log started over since the last checkpoint was queued.
        if pages < next - Self.threshold { next = Self.threshold }
        guard pages >= next else { return trigger.store(next, ordering: .relaxed) }
        trigger.store(pages + Self.threshold, ordering: .relaxed)
        guard !queued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [self] in
            queued.store(false, ordering: .releasing)
            checkpoint()
        }
    }

    /// One `PASSIVE` checkpoint on this checkpointer's connection (on `queue`).
    private func checkpoint() {
        connection.withLock { connection in
            if connection == nil {
                var opened: OpaquePointer?
                guard sqlite3_open_v2(path, &opened, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK
                else {
                    // Nothing to copy back with: the writer's next large commit tries again.
                    sqlite3_close_v2(opened)
                    return
                }
                connection = opened
            }
            checkpoint(on: connection)
        }
    }

    /// One `PASSIVE` checkpoint on `connection`.
    private func checkpoint(on connection: OpaquePointer?) {
        var logged: Int32 = 0
        var copied: Int32 = 0
        let result = sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_PASSIVE, &logged, &copied)
        runs.add(1, ordering: .relaxed)
        if result != SQLITE_OK || copied < logged { partial.add(1, ordering: .relaxed) }
    }
}
