import DepotPostgres
import DepotProtocol
import DepotStore
import Foundation
import Logging
import PostgresNIO
import Synchronization
import XCTest

/// The cluster's log as the daemon uses it (``PostgresReplication``), against a real PostgreSQL
/// (scripts/postgres.sh): numbering under concurrent writers, following by hint and by poll, faults.
final class PostgresReplicationTests: XCTestCase {
    private let logger = Logger(label: "depot.tests.replication")

    /// One entity whose names are unique, so that some writes fail.
    private let model = [
        EntityDescription(
            name: "Entry",
            attributes: [
                AttributeDescription(name: "name", type: .string),
                AttributeDescription(name: "writer", type: .integer),
                AttributeDescription(name: "score", type: .integer, defaultValue: 0),
            ],
            uniquenessConstraints: [["name"]])
    ]

    /// Replicas on real stores writing at once, each from its own thread, some writes failing: a
    /// reader that reads the whole log again and again always sees a prefix `1...k` that never
    /// shrinks, the final log is numbered `1...n` with one entry per successful write (none for a
    /// failed one), and every replica reaches the same objects and history.
    func testReplicasWritingAtOnceNumberTheLogWithoutHoles() async throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = uniqueSchema("numbering")
        let replications = try (0..<4).map { try PostgresReplication(url: url, node: "daemon-\($0)") }
        let reader = try PostgresReplication(url: url, node: "reader")
        defer { (replications + [reader]).forEach { $0.stop() } }
        let stores = try replications.map { try Store(path: TestReplica.temporaryPath(), replication: $0) }
        _ = try stores[0].defineModel(model)
        let shared = try stores[0].save(
            StoreSave.Parameters(inserted: [
                InsertedObject(entity: "Entry", tempId: "s", values: ["name": "shared", "writer": -1])
            ]), writeScope: .unrestricted
        ).0.ids["s"]!

        let writesPerReplica = 30
        let outcomes = Shared<[(replica: Int, committed: Bool)]>([])
        let unexpected = Shared<[String]>([])
        let writing = Shared(true)
        let finishedWriters = Shared(0)
        let reads = Shared((count: 0, violations: [String]()))
        try await runOnThreads(
            count: stores.count + 1,
            { index in
                guard index < stores.count else {
                    // The reader: every snapshot of the whole log is a prefix, and it never shrinks.
                    var longest = 0
                    while writing.withLock({ $0 }) {
                        let numbers = try reader.entries(after: 0, limit: 100_000).map(\.number)
                        reads.withLock { reads in
                            reads.count += 1
                            if numbers != (0..<Int64(numbers.count)).map({ $0 + 1 }) {
                                reads.violations.append("not a prefix: \(numbers)")
                            }
                            if numbers.count < longest {
                                reads.violations.append("shrank from \(longest) to \(numbers.count)")
                            }
                        }
                        longest = max(longest, numbers.count)
                    }
                    return
                }
                let store = stores[index]
                for write in 0..<writesPerReplica {
                    let parameters: StoreSave.Parameters
                    switch write % 5 {
                    case 0:
                        // The same name from every replica: one of them wins, the others fail.
                        parameters = StoreSave.Parameters(inserted: [
                            InsertedObject(entity: "Entry", values: ["name": .string("race \(write)"), "writer": 0])
                        ])
                    case 1:
                        parameters = StoreSave.Parameters(updated: [
                            UpdatedObject(id: shared, values: ["score": .int(Int64(index * 1_000 + write))])
                        ])
                    default:
                        parameters = StoreSave.Parameters(inserted: [
                            InsertedObject(
                                entity: "Entry",
                                values: ["name": .string("r\(index) w\(write)"), "writer": .int(Int64(index))])
                        ])
                    }
                    do {
                        let (_, transaction) = try store.save(parameters, writeScope: .unrestricted)
                        outcomes.withLock { $0.append((index, transaction != nil)) }
                    } catch let error as RPCError where error.code == .uniqueConstraint {
                        outcomes.withLock { $0.append((index, false)) }
                    } catch {
                        unexpected.withLock { $0.append("replica \(index), write \(write): \(error)") }
                    }
                }
                // The last writer to finish stops the reader.
                if finishedWriters.withLock({ finished in
                    finished += 1
                    return finished
                }) == stores.count {
                    writing.withLock { $0 = false }
                }
            })

        XCTAssertEqual(unexpected.withLock { $0 }, [])
        let (readCount, violations) = reads.withLock { ($0.count, $0.violations) }
        XCTAssertGreaterThan(readCount, 3, "the reader must read while the replicas write")
        XCTAssertEqual(violations, [])
        let committed = outcomes.withLock { $0.filter(\.committed) }
        let failed = outcomes.withLock { $0.filter { !$0.committed } }
        XCTAssertGreaterThanOrEqual(
            failed.count, (writesPerReplica / 5) * (stores.count - 1), "every race but one per name fails")

        let log = try reader.entries(after: 0, limit: 100_000)
        // The model change and the shared object come first; then one entry per committed write.
        XCTAssertEqual(log.map(\.number), Array(1...Int64(2 + committed.count)), "dense, in order")
        let authors = try await server.withConnection { connection in
            var counts: [String: Int] = [:]
            let rows = try await connection.query(
                "SELECT author, count(*) FROM \(unescaped: "\"\(url.schema)\".change_log") GROUP BY author",
                logger: logger)
            for try await (author, count) in rows.decode((String, Int64).self) { counts[author] = Int(count) }
            return counts
        }
        for replica in stores.indices {
            let expected = committed.filter { $0.replica == replica }.count + (replica == 0 ? 2 : 0)
            XCTAssertEqual(authors["daemon-\(replica)"] ?? 0, expected, "entries of daemon-\(replica)")
        }

        let request = FetchRequest(entity: "Entry", sort: [SortDescriptor(key: "name")])
        for store in stores { try store.catchUpWithCluster() }
        let expected = try JSONCoding.encode(stores[0].fetch(request, scope: .unrestricted))
        let expectedHistory = try stores[0].history(since: 0, limit: nil).transactions
        // Every update commits (each sets a value no other write sets): one in five writes of each replica.
        let updates = stores.count * (writesPerReplica / 5)
        XCTAssertEqual(
            try stores[0].count(FetchRequest(entity: "Entry"), scope: .unrestricted), 1 + committed.count - updates)
        for (index, store) in stores.enumerated() {
            XCTAssertEqual(store.replicaPosition, Int64(log.count), "replica \(index)")
            XCTAssertEqual(
                try JSONCoding.encode(store.fetch(request, scope: .unrestricted)), expected, "replica \(index)")
            XCTAssertEqual(try store.history(since: 0, limit: nil).transactions, expectedHistory, "replica \(index)")
        }
    }

    /// The follower is woken by NOTIFY (with a poll interval too long to matter) and, where no hint
    /// comes at all, finds new entries by reading the head within its poll interval.
    func testTheFollowerIsWokenByNotifyAndPollsTheHeadWithoutIt() async throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = uniqueSchema("following")
        let writer = try PostgresReplication(url: url, node: "writer")
        let listener = try PostgresReplication(url: url, node: "listener", pollInterval: .seconds(600))
        let poller = try PostgresReplication(url: url, node: "poller", pollInterval: .milliseconds(150))
        defer { [writer, listener, poller].forEach { $0.stop() } }
        let heard = FollowerRecord()
        let polled = FollowerRecord()
        listener.startFollowing(position: { heard.position }) { heard.hint() }
        poller.startFollowing(position: { polled.position }) { polled.hint() }
        // Each calls once after connecting; the listener's LISTEN must be in place before the appends.
        try await waitUntil("both followers connected") { heard.hints >= 1 && polled.hints >= 1 }
        try await waitUntil("the listener's LISTEN") {
            try await server.withConnection { connection in
                let rows = try await connection.query(
                    "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE \("LISTEN%\(listener.log.channel)%")",
                    logger: logger)
                return try await rows.collect().first?.decode(Int64.self) ?? 0 > 0
            }
        }

        // Hinted: the poll is 10 minutes, so only NOTIFY can wake the listener.
        for number in Int64(1)...5 {
            let before = heard.hints
            XCTAssertTrue(try writer.commitWrite([modelEntry(number)], tables: nil))
            try await waitUntil("the hint of entry \(number)", timeout: .seconds(5)) { heard.hints > before }
            heard.position = number
        }
        // Its own entry counts as applied (a hint for it may still race the append's answer); the
        // next one from elsewhere wakes it.
        XCTAssertTrue(try listener.commitWrite([modelEntry(6)], tables: nil))
        let beforeOther = heard.hints
        XCTAssertTrue(try writer.commitWrite([modelEntry(7)], tables: nil))
        try await waitUntil("the hint of entry 7") { heard.hints > beforeOther }

        // No hint at all: entries inserted without NOTIFY are found by the poll.
        polled.position = 7
        for number in Int64(8)...12 {
            let before = polled.hints
            let clock = ContinuousClock()
            let started = clock.now
            _ = try await server.withConnection { connection in
                try await connection.query(
                    """
                    INSERT INTO \(unescaped: "\"\(url.schema)\".change_log") ("transaction", author, changes)
                    VALUES (\(number), 'quiet', '{"kind": "model", "timestamp": 0, "entities": [], "remove": []}')
                    """, logger: logger)
            }
            try await waitUntil("the poll to find entry \(number)") { polled.hints > before }
            // The bound plus room for a loaded 2-core machine; a follower that relied on hints would never come.
            XCTAssertLessThan(clock.now - started, .milliseconds(150 + 850), "entry \(number)")
            polled.position = number
        }
        XCTAssertEqual(try writer.entries(after: 0, limit: 100).map(\.number), Array(1...12))
    }

    /// A small entry rides in its NOTIFY payload: the follower answers with it without reading the
    /// log (shown by editing the row before asking). An entry too big for the payload, or one past
    /// a gap, is read from the log.
    func testAFollowerTakesSmallEntriesFromTheHintAndReadsTheLogForTheRest() async throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = uniqueSchema("hinted")
        let writer = try PostgresReplication(url: url, node: "writer")
        let follower = try PostgresReplication(url: url, node: "follower", pollInterval: .seconds(600))
        defer { [writer, follower].forEach { $0.stop() } }
        let record = FollowerRecord()
        follower.startFollowing(position: { record.position }) { record.hint() }
        try await waitUntil("the follower connected") { record.hints >= 1 }
        try await waitUntil("the follower's LISTEN") {
            try await server.withConnection { connection in
                let rows = try await connection.query(
                    "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE \("LISTEN%\(follower.log.channel)%")",
                    logger: logger)
                return try await rows.collect().first?.decode(Int64.self) ?? 0 > 0
            }
        }
        func data(_ number: Int64, bytes: Int) -> ReplicatedEntry {
            ReplicatedEntry(
                number: number, author: "w", timestamp: 1_700_000_000.5 + Double(number),
                content: .data(
                    transaction: number, changes: #"{"inserted":{"Entry":[1]}}"#,
                    changeset: Array(repeating: UInt8(number), count: bytes)), checksum: number * 11)
        }
        let small = data(1, bytes: 100)
        var before = record.hints
        XCTAssertTrue(try writer.commitWrite([small], tables: nil))
        try await waitUntil("the hint of entry 1") { record.hints > before }
        let table = "\"\(url.schema)\".change_log"
        // The row changed behind the cluster's back: what the follower answers came from the payload.
        _ = try await server.withConnection { connection in
            try await connection.query(
                """
                UPDATE \(unescaped: table) SET changes = jsonb_set(changes, '{author}', '"edited"')
                WHERE "transaction" = 1
                """, logger: logger)
        }
        XCTAssertEqual(try writer.entries(after: 0, limit: 10).map(\.author), ["edited"])
        XCTAssertEqual(try follower.entries(after: 0, limit: 10), [small], "from the payload")
        record.position = 1

        // Too big to carry: the hint names the head only, and the log gives the entry.
        let big = data(2, bytes: 9_000)
        before = record.hints
        XCTAssertTrue(try writer.commitWrite([big], tables: nil))
        try await waitUntil("the hint of entry 2") { record.hints > before }
        XCTAssertEqual(try follower.entries(after: 1, limit: 10), [big])
        record.position = 2

        // Entry 4 is heard but 3 was inserted without a hint: the log gives both, in order.
        _ = try await server.withConnection { connection in
            try await connection.query(
                """
                INSERT INTO \(unescaped: table) ("transaction", author, changes)
                VALUES (3, 'quiet', '{"kind": "model", "timestamp": 0, "entities": [], "remove": []}')
                """, logger: logger)
        }
        before = record.hints
        XCTAssertTrue(try writer.commitWrite([data(4, bytes: 10)], tables: nil))
        try await waitUntil("the hint of entry 4") { record.hints > before }
        XCTAssertEqual(try follower.entries(after: 2, limit: 10).map(\.number), [3, 4])
    }

    /// One prepared statement appends one entry or a group's several (arrays): the log gives them
    /// back exactly, a continued entry without changeset or checksum; a group whose first number is
    /// taken goes in not at all, nor does one starting past the head; the next number then goes in.
    func testOneStatementAppendsAnEntryOrAWholeGroupOrNothing() throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = uniqueSchema("groups")
        let writer = try PostgresReplication(url: url, node: "writer")
        defer { writer.stop() }
        func data(_ number: Int64, continued: Bool) -> ReplicatedEntry {
            ReplicatedEntry(
                number: number, author: "w\(number)", timestamp: 1_700_000_000.25 + Double(number),
                content: .data(
                    transaction: number, changes: #"{"inserted":{"Entry":[\#(number)]}}"#,
                    changeset: continued ? [] : [1, 0, 255, UInt8(number)], continued: continued),
                checksum: continued ? nil : -number * 1_000_003)
        }
        XCTAssertTrue(try writer.commitWrite([data(1, continued: false)], tables: nil))
        let group = [data(2, continued: true), data(3, continued: true), data(4, continued: false)]
        XCTAssertTrue(try writer.commitWrite(group, tables: nil))
        XCTAssertEqual(try writer.entries(after: 0, limit: 10), [data(1, continued: false)] + group)
        XCTAssertFalse(
            try writer.commitWrite([data(4, continued: true), data(5, continued: false)], tables: nil),
            "number 4 is taken")
        XCTAssertFalse(try writer.commitWrite([data(6, continued: false)], tables: nil), "5 is missing")
        XCTAssertEqual(try writer.entries(after: 4, limit: 10), [])
        XCTAssertTrue(try writer.commitWrite([modelEntry(5), data(6, continued: false)], tables: nil))
        XCTAssertEqual(try writer.entries(after: 4, limit: 10).map(\.number), [5, 6])
    }

    /// PostgreSQL stopped under a writer and a follower: the write fails with -32603 naming
    /// PostgreSQL (no hang); once the server is back, writes resume at the next number and the
    /// follower reconnects and is told to catch up.
    func testAStoppedServerFailsWritesAndTheFollowerCatchesUpAfterItsRestart() async throws {
        let server = try PostgresServer.start()
        defer { try? server.stop() }
        var url = server.url
        url.schema = uniqueSchema("faults")
        let writer = try PostgresReplication(url: url, node: "writer", statementTimeout: .seconds(2))
        let follower = try PostgresReplication(
            url: url, node: "follower", statementTimeout: .seconds(2), pollInterval: .milliseconds(50))
        defer { [writer, follower].forEach { $0.stop() } }
        let record = FollowerRecord()
        follower.startFollowing(position: { record.position }) { record.hint() }
        for number in Int64(1)...3 { XCTAssertTrue(try writer.commitWrite([modelEntry(number)], tables: nil)) }
        try await waitUntil("the follower to see 3") { record.hints >= 2 }
        record.position = 3

        try server.pause()
        let clock = ContinuousClock()
        let started = clock.now
        do {
            _ = try writer.commitWrite([modelEntry(4)], tables: nil)
            XCTFail("a write with PostgreSQL stopped must fail")
        } catch {
            XCTAssertEqual(error.code, .internalError)
            XCTAssertTrue(error.message.contains("PostgreSQL"), error.message)
        }
        XCTAssertLessThan(clock.now - started, .seconds(15), "no hang")

        try server.resume()
        let hintsBefore = record.hints
        // The writer's connection comes back after its backoff (at most 2 s); it fails fast meanwhile.
        try await waitUntil("a write after the restart", timeout: .seconds(15)) {
            (try? writer.commitWrite([modelEntry(4)], tables: nil)) == true
        }
        try await waitUntil("the follower to catch up after the restart", timeout: .seconds(15)) {
            record.hints > hintsBefore
        }
        XCTAssertEqual(try writer.entries(after: 0, limit: 100).map(\.number), Array(1...4), "no hole, no repeat")
    }

    /// A schema name that is not a plain identifier is refused, naming the `store` parameter.
    func testASchemaNameThatIsNotAPlainIdentifierIsRefused() throws {
        let server = try PostgresServer.sharedOrFail()
        var url = server.url
        url.schema = "Robert'); DROP TABLE"
        do {
            _ = try PostgresReplication(url: url, node: "bad")
            XCTFail("the schema name must be refused")
        } catch {
            XCTAssertEqual(error.code, .invalidParams)
            XCTAssertEqual(error.data?["field"], "store")
            XCTAssertTrue(error.message.contains("Robert"), error.message)
        }
    }

    // MARK: Helpers

    /// A model entry numbered `number` (it changes nothing; the follower does not decode it).
    private func modelEntry(_ number: Int64) -> ReplicatedEntry {
        ReplicatedEntry(
            number: number, author: nil, timestamp: Date().timeIntervalSince1970,
            content: .model(entities: [], removing: []))
    }

    /// Runs `body(0..<count)` each on a thread of its own (stores and the log's writer block their
    /// thread) and waits for all of them; the first error is rethrown.
    private func runOnThreads(count: Int, _ body: @escaping @Sendable (Int) throws -> Void) async throws {
        let failures = Shared<[any Error]>([])
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for index in 0..<count {
                group.enter()
                Thread {
                    do { try body(index) } catch { failures.withLock { $0.append(error) } }
                    group.leave()
                }.start()
            }
            group.notify(queue: .global()) { done.resume() }
        }
        if let failure = failures.withLock({ $0.first }) { throw failure }
    }

    /// Waits until `condition` holds, failing after `timeout`.
    private func waitUntil(
        _ description: String, timeout: Duration = .seconds(15), file: StaticString = #filePath, line: UInt = #line,
        _ condition: () async throws -> Bool
    ) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while try await !condition() {
            guard clock.now < deadline else {
                XCTFail("timed out waiting for \(description)", file: file, line: line)
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// What a follower was told: how many hints, and the position its daemon would report.
private final class FollowerRecord: Sendable {
    private let state = Mutex((hints: 0, position: Int64(0)))

    /// How many times the follower said new entries may have been committed.
    var hints: Int { state.withLock { $0.hints } }

    /// The position the follower compares hints and the head with.
    var position: Int64 {
        get { state.withLock { $0.position } }
        set { state.withLock { $0.position = newValue } }
    }

    /// Counts one hint.
    func hint() { state.withLock { $0.hints += 1 } }
}

/// A value threads share, behind a lock (a class, so that escaping closures can capture it).
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    /// Runs `body` with the value, under the lock.
    func withLock<Result>(_ body: (inout sending Value) -> sending Result) -> sending Result {
        mutex.withLock(body)
    }
}
