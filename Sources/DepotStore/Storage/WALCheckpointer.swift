import Dispatch
import GRDB
import GRDBSQLite
import Synchronization

/// Copies the WAL back into the database file off the writer.
///
/// SQLite's automatic checkpoint runs on the connection that commits, inside
/// the commit that crosses its threshold: that write, and every save queued
/// behind it, would wait for a copy of thousands of pages and an fsync (a
/// 2,000-row batch crosses it every few commits). Instead, the writer's WAL
/// hook (which replaces the automatic checkpoint) only notes the WAL's size,
/// and a `PASSIVE` checkpoint runs on a connection and a queue of its own: it
/// never takes the write lock, and the next write restarts the WAL once the
/// checkpoint has caught up with it.
final class WALCheckpointer: @unchecked Sendable {
    // @unchecked: `connection` is touched only on `queue`.
    /// WAL pages past which a checkpoint is due: SQLite's own default.
    static let threshold: Int32 = 1000

    private let queue = DispatchQueue(label: "depot.checkpoint", qos: .utility)
    private let scheduled = Atomic<Bool>(false)
    private let failure = Mutex<String?>(nil)
    private let path: String
    /// Its own connection, opened by the first checkpoint.
    private var connection: DatabaseQueue?

    /// A checkpointer for the database at `path`.
    init(path: String) {
        self.path = path
    }

    /// Makes `db` (the writer) schedule a checkpoint after a commit that leaves the WAL past
    /// ``threshold``, instead of checkpointing itself.
    func install(on db: Database) {
        // Retained for the connection's life; it holds the checkpointer weakly.
        let context = Unmanaged.passRetained(Hook(self)).toOpaque()
        sqlite3_wal_hook(
            db.sqliteConnection,
            { context, _, _, pages in
                if pages >= WALCheckpointer.threshold, let context {
                    Unmanaged<Hook>.fromOpaque(context).takeUnretainedValue().checkpointer?.schedule()
                }
                return SQLITE_OK
            }, context)
    }

    /// Runs one passive checkpoint soon, unless one is already waiting to run.
    func schedule() {
        guard !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [self] in
            scheduled.store(false, ordering: .releasing)
            // Best effort, like SQLite's own: a checkpoint that cannot finish now is retried
            // after a later commit, and the shutdown checkpoint writes back whatever is left.
            do {
                if connection == nil { connection = try DatabaseQueue(path: path) }
                _ = try connection?.writeWithoutTransaction { db in try db.checkpoint(.passive) }
                failure.withLock { $0 = nil }
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
        }
    }

    /// Why the last checkpoint failed, `nil` when it did not (it is retried after a later commit).
    var lastFailure: String? { failure.withLock { $0 } }

    /// Waits for a checkpoint under way (before the shutdown one).
    func wait() { queue.sync {} }

    /// What the WAL hook holds: the checkpointer, weakly, so that a closed store lets it go.
    private final class Hook: @unchecked Sendable {
        // @unchecked: written once, before the hook is installed.
        weak var checkpointer: WALCheckpointer?
        init(_ checkpointer: WALCheckpointer) { self.checkpointer = checkpointer }
    }
}
