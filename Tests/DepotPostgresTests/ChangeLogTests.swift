import DepotPostgres
import DepotProtocol
import Foundation
import Logging
import PostgresNIO
import XCTest

/// The change log against a real PostgreSQL (scripts/postgres.sh): numbering, tailing, faults.
final class ChangeLogTests: XCTestCase {
    private let logger = Logger(label: "depot.tests.changelog")

    private struct Rollback: Error {}

    /// What a writer committed: the number `append` returned and the changes it carried.
    private actor Commits {
        var changesByNumber: [Int64: JSONValue] = [:]
        var rolledBack: [JSONValue] = []
        func committed(_ number: Int64, _ changes: JSONValue) { changesByNumber[number] = changes }
        func rolledBack(_ changes: JSONValue) { rolledBack.append(changes) }
    }

    private func makeLog(_ prefix: String, on server: PostgresServer, notifies: Bool = true) async throws -> ChangeLog {
        let log = try ChangeLog(schema: uniqueSchema(prefix), notifies: notifies)
        let connection = try await server.connect()
        try await log.createSchema(on: connection, logger: logger)
        try await connection.close()
        return log
    }

    /// Appends `count` entries, one transaction each, and returns their numbers.
    @discardableResult
    private func append(_ count: Int, to log: ChangeLog, on server: PostgresServer, tag: String) async throws -> [Int64]
    {
        let connection = try await server.connect()
        var numbers: [Int64] = []
        for index in 0..<count {
            let number = try await connection.withTransaction(logger: logger) { connection in
                try await log.append(
                    changes: .object(["tag": .string(tag), "index": .int(Int64(index))]), author: "writer",
                    on: connection, logger: logger)
            }
            numbers.append(number)
        }
        try await connection.close()
        return numbers
    }

    /// Many writers on separate connections, random delays, some rollbacks: a concurrent tailer sees
    /// exactly the committed numbers, 1...n with no gap, strictly increasing, each with its content.
    func testConcurrentWritersAreTailedInCommitOrderWithoutGaps() async throws {
        let server = try PostgresServer.sharedOrFail()
        let log = try await makeLog("property", on: server)
        let connection = try await server.connect()
        try await connection.query(
            "CREATE TABLE \(unescaped: log.schema).items (id bigserial PRIMARY KEY, writer int, body text)",
            logger: logger)
        try await connection.close()

        var options = ChangeLogTailer.Options()
        options.batchSize = 7
        options.pollInterval = .milliseconds(5)
        let record = TailerRecord()
        let tailer = ChangeLogTailer(name: "observer", log: log, connection: server.url.configuration, options: options)
        let tailing = tailer.start(recordingIn: record)
        defer { tailing.cancel() }

        let commits = Commits()
        let writers = 10
        let transactionsPerWriter = 25
        // A second reader, outside the tailer: every snapshot of the whole log is a prefix 1...k,
        // and k never shrinks.
        let prefixReader = Task { [logger] () -> (reads: Int, violations: [String]) in
            var reads = 0
            var violations: [String] = []
            var longest = 0
            try? await server.withConnection { connection in
                while !Task.isCancelled {
                    // Throws once cancelled (PostgresNIO's row sequence checks): that ends the loop too.
                    let numbers = try await log.entries(after: 0, limit: 100_000, on: connection, logger: logger)
                        .map(\.transaction)
                    reads += 1
                    if numbers != (0..<Int64(numbers.count)).map({ $0 + 1 }) {
                        violations.append("not a prefix: \(numbers)")
                    }
                    if numbers.count < longest { violations.append("shrank from \(longest) to \(numbers.count)") }
                    longest = max(longest, numbers.count)
                }
            }
            return (reads, violations)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask { [logger] in
                    try await server.withConnection { connection in
                        for index in 0..<transactionsPerWriter {
                            let changes = JSONValue.object([
                                "writer": .int(Int64(writer)), "index": .int(Int64(index)),
                                "body": .string(String(repeating: "x", count: Int.random(in: 0...40))),
                            ])
                            let rollsBack = Int.random(in: 0..<5) == 0
                            do {
                                let number = try await connection.withTransaction(logger: logger) { connection in
                                    try await connection.query(
                                        "INSERT INTO \(unescaped: log.schema).items (writer, body) VALUES (\(writer), 'row')",
                                        logger: logger)
                                    try await Task.sleep(for: .microseconds(Int.random(in: 0...2_000)))
                                    let number = try await log.append(
                                        changes: changes, author: "writer-\(writer)", on: connection, logger: logger)
                                    // Held lock: commits of the others wait here, so vary how long.
                                    try await Task.sleep(for: .microseconds(Int.random(in: 0...1_000)))
                                    if rollsBack { throw Rollback() }
                                    return number
                                }
                                await commits.committed(number, changes)
                            } catch let error as PostgresTransactionError where error.closureError is Rollback {
                                await commits.rolledBack(changes)
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }

        prefixReader.cancel()
        let (reads, violations) = await prefixReader.value
        XCTAssertGreaterThan(reads, 10, "the prefix reader must read while the writers write")
        XCTAssertEqual(violations, [])

        let committed = await commits.changesByNumber
        let rolledBack = await commits.rolledBack
        XCTAssertEqual(committed.count + rolledBack.count, writers * transactionsPerWriter)
        XCTAssertGreaterThan(rolledBack.count, 0, "the run must roll some transactions back")
        // Rolled-back numbers are taken again: the committed ones are dense.
        XCTAssertEqual(committed.keys.sorted(), Array(1...Int64(committed.count)))

        try await record.wait(for: "every committed entry") { $0.entries.count >= committed.count }
        tailing.cancel()
        _ = await tailing.result
        let seen = await record.entries
        XCTAssertEqual(seen.map(\.transaction), Array(1...Int64(committed.count)), "in order, no gap, no repeat")
        for entry in seen {
            XCTAssertEqual(entry.changes, committed[entry.transaction], "content of \(entry.transaction)")
            if case .object(let fields) = entry.changes, case .int(let writer) = fields["writer"] {
                XCTAssertEqual(entry.author, "writer-\(writer)")
            } else {
                XCTFail("entry \(entry.transaction) has unexpected changes \(entry.changes)")
            }
        }
        let seenChanges = Set(seen.map(\.changes))
        for changes in rolledBack { XCTAssertFalse(seenChanges.contains(changes), "rolled back, yet seen: \(changes)") }
        // Every batch started right after the one before it: no reader ever saw a later number first.
        var last: Int64 = 0
        for case .entries(let batch) in await record.events {
            XCTAssertEqual(batch.first?.transaction, last + 1)
            last = batch.last?.transaction ?? last
        }
        let interruptions = await record.interruptions
        XCTAssertEqual(interruptions, [])
    }

    /// A tailer stopped halfway and restarted under its name resumes after its last delivered
    /// entry and sees the rest exactly once; another name starts from the beginning.
    func testRestartedTailerResumesAfterItsDurablePosition() async throws {
        let server = try PostgresServer.sharedOrFail()
        let log = try await makeLog("resume", on: server)
        try await append(40, to: log, on: server, tag: "first")

        var options = ChangeLogTailer.Options()
        options.batchSize = 6
        let tailer = ChangeLogTailer(name: "daemon-a", log: log, connection: server.url.configuration, options: options)
        let firstRecord = TailerRecord()
        // Stops itself, from inside the consumer, once it has handled 20 or more entries.
        let first = Task {
            try await tailer.run { event in
                await firstRecord.record(event)
                if await firstRecord.entries.count >= 20 { withUnsafeCurrentTask { $0?.cancel() } }
            }
        }
        try await first.value
        let firstSeen = await firstRecord.entries.map(\.transaction)
        XCTAssertEqual(firstSeen, Array(1...Int64(firstSeen.count)))
        XCTAssertEqual(firstSeen.count, 24, "four batches of six")
        let firstConnections = await firstRecord.connections
        XCTAssertEqual(firstConnections, [0])

        try await append(10, to: log, on: server, tag: "second")
        let secondRecord = TailerRecord()
        let second = tailer.start(recordingIn: secondRecord)
        defer { second.cancel() }
        try await secondRecord.wait(for: "the rest") { $0.entries.count >= 50 - firstSeen.count }
        try await Task.sleep(for: .milliseconds(300))  // anything delivered twice would arrive by now
        second.cancel()
        _ = await second.result
        let secondConnections = await secondRecord.connections
        XCTAssertEqual(secondConnections, [Int64(firstSeen.count)])
        let secondSeen = await secondRecord.entries.map(\.transaction)
        XCTAssertEqual(secondSeen, Array(Int64(firstSeen.count + 1)...50), "exactly once, after the saved position")

        let otherRecord = TailerRecord()
        let other = ChangeLogTailer(name: "daemon-b", log: log, connection: server.url.configuration).start(
            recordingIn: otherRecord)
        defer { other.cancel() }
        try await otherRecord.wait(for: "everything from the start") { $0.entries.count >= 50 }
        let otherSeen = await otherRecord.entries.map(\.transaction)
        XCTAssertEqual(otherSeen, Array(1...50))
    }

    /// NOTIFY is only a hint: with no notifications sent, and with no listener, a tailer still
    /// sees each entry within its poll interval.
    func testTailerSeesEntriesWithinThePollBoundWithoutNotifications() async throws {
        let server = try PostgresServer.sharedOrFail()
        let log = try await makeLog("polling", on: server, notifies: false)
        let pollInterval = Duration.milliseconds(150)
        for listens in [true, false] {
            var options = ChangeLogTailer.Options()
            options.pollInterval = pollInterval
            options.listens = listens
            let record = TailerRecord()
            let tailing = ChangeLogTailer(
                name: "poller-\(listens)", log: log, connection: server.url.configuration, options: options
            ).start(recordingIn: record)
            defer { tailing.cancel() }
            try await record.wait(for: "the connection") { !$0.connections.isEmpty }
            let connection = try await server.connect()
            let already = try await log.lastTransaction(on: connection, logger: logger)
            var latencies: [Duration] = []
            for index in 1...8 {
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...200)))
                let clock = ContinuousClock()
                let started = clock.now
                _ = try await connection.withTransaction(logger: logger) { connection in
                    try await log.append(changes: .int(Int64(index)), author: "quiet", on: connection, logger: logger)
                }
                try await record.wait(for: "entry \(index)") { $0.entries.count >= Int(already) + index }
                latencies.append(clock.now - started)
            }
            try await connection.close()
            tailing.cancel()
            _ = await tailing.result
            let seen = await record.entries.map(\.transaction)
            XCTAssertEqual(seen, Array(1...(already + 8)))
            // The bound plus generous room for a loaded 2-core machine; a lost hint would mean forever.
            let slowest = latencies.max()!
            XCTAssertLessThan(slowest, pollInterval + .milliseconds(850), "listens: \(listens), latencies \(latencies)")
        }
    }

    /// PostgreSQL stopped under a tailer: its consumer is told (no hang), and once the server is
    /// back the tailer reconnects and catches up from its saved position without loss.
    func testTailerReportsALostServerAndCatchesUpAfterItsRestart() async throws {
        let server = try PostgresServer.start()
        defer { try? server.stop() }
        let log = try await makeLog("faults", on: server)
        var options = ChangeLogTailer.Options()
        options.pollInterval = .milliseconds(50)
        options.maximumBackoff = .milliseconds(200)
        options.statementTimeout = .seconds(2)
        let record = TailerRecord()
        let tailing = ChangeLogTailer(
            name: "survivor", log: log, connection: server.url.configuration, options: options
        )
        .start(recordingIn: record)
        defer { tailing.cancel() }
        try await append(10, to: log, on: server, tag: "before")
        try await record.wait(for: "the entries before the stop") { $0.entries.count >= 10 }

        let stopped = try server.pause()
        do {
            _ = try await server.connect()
            XCTFail("the server still answers after the stop: \(stopped)")
        } catch {}
        try await record.wait(for: "an interruption", timeout: .seconds(10)) { !$0.interruptions.isEmpty }
        let interruption = await record.interruptions.first
        guard case .database(let cause) = interruption else {
            return XCTFail("expected a database error, got \(String(describing: interruption))")
        }
        XCTAssertFalse(cause.isEmpty)

        try server.resume()
        try await append(15, to: log, on: server, tag: "after")
        try await record.wait(for: "the entries after the restart") { $0.entries.count >= 25 }
        try await Task.sleep(for: .milliseconds(200))
        tailing.cancel()
        _ = await tailing.result
        let seen = await record.entries.map(\.transaction)
        XCTAssertEqual(seen, Array(1...25), "no loss, no repeat across the restart")
        let connections = await record.connections
        XCTAssertEqual(connections.first, 0)
        XCTAssertEqual(connections.last, 10, "reconnected and resumed after its saved position")
    }

    /// Misuse is refused with a typed error rather than numbering without the lock's protection.
    func testAppendOutsideATransactionOrAboveReadCommittedIsRefused() async throws {
        let server = try PostgresServer.sharedOrFail()
        let log = try await makeLog("misuse", on: server)
        let connection = try await server.connect()
        defer { Task { [connection] in try? await connection.close() } }
        do {
            try await log.append(changes: .null, author: "autocommit", on: connection, logger: logger)
            XCTFail("append outside a transaction must fail")
        } catch {
            XCTAssertEqual(error, .notInTransaction)
        }
        do {
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: logger)
            try await log.append(changes: .null, author: "snapshot", on: connection, logger: logger)
            XCTFail("append in REPEATABLE READ must fail")
        } catch let error as ChangeLogError {
            XCTAssertEqual(error, .unsupportedIsolation("repeatable read"))
        }
        try await connection.query("ROLLBACK", logger: logger)
        let last = try await log.lastTransaction(on: connection, logger: logger)
        XCTAssertEqual(last, 0)
        XCTAssertThrowsError(try ChangeLog(schema: "Robert'); DROP TABLE"))
    }
}
