import DepotProtocol
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// Stops a read that runs on without producing a row for longer than a limit:
/// a SUBQUERY or another predicate that would run away answers with a clear
/// error instead of holding a reader forever.
///
/// One per reader connection, called by SQLite's progress handler every few
/// thousand virtual-machine steps. A read arms it (``Store/read(_:)``), and the
/// row loops of big reads feed it (``progressed()``) so that streaming a
/// million rows never trips it: only time without a row counts.
final class StatementWatchdog: Sendable {
    private let limitNanoseconds: UInt64
    /// When the read last made progress (uptime nanoseconds); 0 while disarmed.
    private let lastProgress = Atomic<UInt64>(0)
    private let trippedFlag = Atomic<Bool>(false)

    init(limit: Double) {
        limitNanoseconds = UInt64(max(limit, 0.001) * 1e9)
    }

    /// The limit in seconds.
    var limit: Double { Double(limitNanoseconds) / 1e9 }

    /// Whether the last armed read was stopped by it.
    var tripped: Bool { trippedFlag.load(ordering: .relaxed) }

    func arm() {
        trippedFlag.store(false, ordering: .relaxed)
        lastProgress.store(Self.now, ordering: .relaxed)
    }

    func disarm() { lastProgress.store(0, ordering: .relaxed) }

    /// A row came: the clock starts again.
    func progressed() {
        if lastProgress.load(ordering: .relaxed) != 0 { lastProgress.store(Self.now, ordering: .relaxed) }
    }

    /// Whether SQLite must stop the running statement (from the progress handler).
    fileprivate func shouldInterrupt() -> Bool {
        let last = lastProgress.load(ordering: .relaxed)
        guard last != 0, Self.now &- last > limitNanoseconds else { return false }
        trippedFlag.store(true, ordering: .relaxed)
        return true
    }

    private static var now: UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Installs a watchdog on `db` (a reader connection); the connection keeps it.
    static func install(on db: Database, limit: Double) -> StatementWatchdog {
        let watchdog = StatementWatchdog(limit: limit)
        // Retained for the connection's life: readers live as long as the pool.
        let context = Unmanaged.passRetained(watchdog).toOpaque()
        sqlite3_progress_handler(
            db.sqliteConnection, 4096,
            { context in
                guard let context else { return 0 }
                return Unmanaged<StatementWatchdog>.fromOpaque(context).takeUnretainedValue().shouldInterrupt() ? 1 : 0
            }, context)
        return watchdog
    }
}

/// The watchdogs of a pool's reader connections, by connection.
final class StatementWatchdogs: Sendable {
    private let byConnection = Mutex<[UInt: StatementWatchdog]>([:])

    func register(_ watchdog: StatementWatchdog, for connection: OpaquePointer) {
        byConnection.withLock { $0[UInt(bitPattern: connection)] = watchdog }
    }

    func watchdog(for connection: OpaquePointer) -> StatementWatchdog? {
        byConnection.withLock { $0[UInt(bitPattern: connection)] }
    }
}
