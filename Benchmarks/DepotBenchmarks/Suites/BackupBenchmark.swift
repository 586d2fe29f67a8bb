import Foundation
import GRDBSQLite

/// An online backup of a running daemon (`server/backup`, DESIGN.md §12) against
/// the `sqlite3` shell's `.backup` of the same file on an idle store, and what the
/// backup costs the saves that go on meanwhile (issue 36's rows):
///
/// - backup time of a 1M-row store ÷ `sqlite3 … ".backup …"` (target ≤ 2×);
/// - a writer's save p99 during backups ÷ its save p99 without (target ≤ 3×).
struct BackupBenchmark: Benchmark {
    static let name = "backup"
    static let summary =
        "server/backup of 1M rows vs sqlite3 .backup (≤ 2×); save p99 during a backup vs without (≤ 3×)"

    static let model = """
        {"entities":[{"name":"Item","attributes":[{"name":"name","type":"string"},{"name":"n","type":"integer"}]}]}
        """

    func run(_ suite: SuiteRun) async throws {
        let quick = suite.options.quick
        let rows = quick ? 50_000 : 1_000_000
        let rounds = quick ? 1 : 3
        let daemon = try suite.startDaemon(.ipc)
        defer { daemon.stop() }
        let admin = try RawRPCClient(endpoint: daemon.endpoint)
        try admin.initialize(name: "backup admin")
        _ = try admin.call("model/define", params: Self.model)
        try daemon.insertDirectly(rows, with: #"INSERT INTO "e_Item" (id, _version, "name", "n") VALUES (?, 1, ?, ?)"#)
        {
            statement, index in
            sqlite3_bind_int64(statement, 1, Int64(index))
            sqlite3_bind_text(statement, 2, "item \(index) " + String(repeating: "x", count: 40), -1, sqliteTransient)
            sqlite3_bind_int64(statement, 3, Int64(index))
        }
        let source = daemon.dataDirectory.appendingPathComponent("depot.sqlite").path

        // The baseline: the sqlite3 shell's .backup of the same file, with the daemon idle.
        var shell: [Double] = []
        for round in 0..<rounds {
            let copy = suite.directory.appendingPathComponent("shell-\(round).sqlite").path
            let start = ContinuousClock.now
            try Self.runShell(source, ".backup '\(copy)'")
            shell.append((ContinuousClock.now - start).milliseconds)
            try? FileManager.default.removeItem(atPath: copy)
        }

        // The daemon's own, idle.
        var idle: [Double] = []
        for round in 0..<rounds {
            idle.append(try backup(admin, into: suite.directory.appendingPathComponent("idle-\(round)")))
        }

        // A writer saving one row at a time, without and then during backups.
        let writer = SaveLoop(endpoint: daemon.endpoint)
        try writer.start()
        try await Task.sleep(for: .seconds(quick ? 0.5 : 2))
        let without = writer.take()
        var busy: [Double] = []
        for round in 0..<rounds {
            busy.append(try backup(admin, into: suite.directory.appendingPathComponent("busy-\(round)")))
        }
        let during = writer.take()
        try writer.stop()

        let shellMs = percentile(shell, 0.5)
        let idleMs = percentile(idle, 0.5)
        suite.check(
            "backup.\(rows)-rows.time-ratio", idleMs / shellMs, target: 2, .atMost, of: "server/backup (idle) ms",
            over: "sqlite3 .backup ms")
        let p99Without = percentile(without, 0.99)
        let p99During = percentile(during, 0.99)
        suite.check(
            "backup.save-p99-ratio", p99During / p99Without, target: 3, .atMost, of: "save p99 during backups",
            over: "save p99 without")
        suite.note(
            "backup",
            [
                "rows": .int(Int64(rows)), "sqlite3Ms": .double(shellMs), "idleMs": .double(idleMs),
                "underSavesMs": .double(percentile(busy, 0.5)),
            ])
        suite.note(
            "saves",
            [
                "withoutP50Ms": .double(percentile(without, 0.5)), "withoutP99Ms": .double(p99Without),
                "duringP50Ms": .double(percentile(during, 0.5)), "duringP99Ms": .double(p99During),
                "withoutCount": .int(Int64(without.count)), "duringCount": .int(Int64(during.count)),
            ])
    }

    /// The milliseconds `server/backup` into `directory` took.
    private func backup(_ admin: RawRPCClient, into directory: URL) throws -> Double {
        let start = ContinuousClock.now
        _ = try admin.call("server/backup", params: #"{"destination":"\#(directory.path)"}"#)
        let elapsed = (ContinuousClock.now - start).milliseconds
        try? FileManager.default.removeItem(at: directory)
        return elapsed
    }

    /// Runs the `sqlite3` shell on `database` with one dot command.
    private static func runShell(_ database: String, _ command: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["sqlite3", database, command]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BenchmarkError("sqlite3 \(command) failed") }
    }
}

/// `SQLITE_TRANSIENT`: SQLite copies the bound text.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// One session saving one row again and again on its own thread, its latencies taken in parts.
private final class SaveLoop: @unchecked Sendable {
    private let endpoint: String
    private let lock = NSLock()
    private var latencies: [Double] = []
    private var running = true
    private var failure: Error?
    private var thread: Thread?
    /// The writer's session; used only on its thread once started.
    private var client: RawRPCClient?
    private let finished = DispatchSemaphore(value: 0)

    init(endpoint: String) { self.endpoint = endpoint }

    /// Connects and starts saving.
    func start() throws {
        let client = try RawRPCClient(endpoint: endpoint)
        try client.initialize(name: "backup writer")
        let inserted = try client.call(
            "store/save", params: #"{"inserted":[{"entity":"Item","tempId":"w","values":{"name":"writer","n":0}}]}"#)
        guard let id = inserted["ids"]?["w"]?.stringValue else { throw BenchmarkError("no id for the writer's row") }
        self.client = client
        let thread = Thread { [self] in
            guard let client = self.client else { return }
            var count = 0
            while lock.withLock({ running }) {
                count += 1
                let start = ContinuousClock.now
                do {
                    _ = try client.call(
                        "store/save", params: #"{"updated":[{"id":"\#(id)","values":{"n":\#(count)}}]}"#)
                } catch {
                    lock.withLock { failure = error }
                    break
                }
                let elapsed = (ContinuousClock.now - start).milliseconds
                lock.withLock { latencies.append(elapsed) }
            }
            finished.signal()
        }
        self.thread = thread
        thread.start()
    }

    /// The latencies since the last take.
    func take() -> [Double] {
        lock.withLock {
            defer { latencies = [] }
            return latencies
        }
    }

    /// Stops saving; throws what stopped it early, if anything did.
    func stop() throws {
        lock.withLock { running = false }
        finished.wait()
        if let failure = lock.withLock({ failure }) { throw failure }
    }
}
