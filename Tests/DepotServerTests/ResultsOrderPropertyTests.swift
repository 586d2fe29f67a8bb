import DepotProtocol
import DepotStore
import DepotTestSupport
import Foundation
import Synchronization
import XCTest

@testable import DepotServer

/// Random interleavings of every results request with saves from several
/// sessions, in memory: each session pipelines saves (some failing),
/// `results/objects`, `results/snapshot`, `results/unsubscribe` and new
/// subscribes over plain, filtered, equality-filed, windowed and coalescing
/// requests, while the engine fails to follow one random transaction. Each
/// session's stream is then replayed as a client would: every `objects`
/// answer equals the results the session holds at that point of its stream
/// (its `seq` the last one it received), every `snapshot` answer the ids it
/// holds, `seq` has no gaps, nothing follows an unsubscribe's answer, and at
/// the end the deltas applied to the first results equal a fresh fetch (the
/// delta oracle); an invalidated subscription resyncs to a fresh fetch.
///
/// The sessions observe too (`store/observe`, `store/unobserve`, pipelined):
/// some through a key whose scope reads `score >= 10`, some with values. For
/// each commit T, every observer registered when T was published hears it
/// before T's response reaches the saving session (a scoped one whenever T put
/// a row in its scope, and never of a row outside it), with the values T left;
/// and each session receives T's notifications before those of T+1.
final class ResultsOrderPropertyTests: XCTestCase {
    /// The scoped sessions' key, whose role reads only items scoring 10 or more.
    static let scopedKey = CoreKeys.publicKey(1)
    static let keys = "\(scopedKey) member scoped"
    static let policy = #"""
        {"roles": {"member": {"base": "write", "entities": {
          "Item": {"read": "score >= 10", "write": "TRUEPREDICATE"}}}}}
        """#
    /// What the scoped key may read.
    static func inScope(score: Int) -> Bool { score >= 10 }

    /// The `store/observe` params the sessions pick from.
    static let observations = [
        "{}", #"{"entities": ["Item"]}"#, #"{"includeValues": true}"#,
        #"{"entities": ["Item"], "includeValues": true}"#,
    ]

    /// The subscribe params the sessions pick from, with the fetch that gives their results afresh.
    static let requests: [(subscribe: String, fetch: String)] = [
        (
            #"{"request": {"entity": "Item", "sort": [{"key": "score"}, {"key": "name"}]}, "include": "all"}"#,
            #"{"entity": "Item", "sort": [{"key": "score"}, {"key": "name"}]}"#
        ),
        (
            #"{"request": {"entity": "Item", "predicate": "score >= 20", "sort": [{"key": "score", "ascending": false}, {"key": "name"}]}, "include": "all"}"#,
            #"{"entity": "Item", "predicate": "score >= 20", "sort": [{"key": "score", "ascending": false}, {"key": "name"}]}"#
        ),
        (
            #"{"request": {"entity": "Item", "sort": [{"key": "name"}], "limit": 5, "offset": 2}, "include": "all"}"#,
            #"{"entity": "Item", "sort": [{"key": "name"}], "limit": 5, "offset": 2}"#
        ),
        (
            #"{"request": {"entity": "Item", "predicate": "score < 30", "sort": [{"key": "name"}]}, "include": "all", "coalesceMs": 3}"#,
            #"{"entity": "Item", "predicate": "score < 30", "sort": [{"key": "name"}]}"#
        ),
        (
            #"{"request": {"entity": "Item", "predicate": "score == 7", "sort": [{"key": "name"}]}, "include": "all"}"#,
            #"{"entity": "Item", "predicate": "score == 7", "sort": [{"key": "name"}]}"#
        ),
        // Live grouped results (rows are groups, ids group:[score]): a window, and coalescing with having.
        (
            #"{"request": {"entity": "Item", "groupBy": ["score"], "aggregates": [{"name": "n", "function": "count"}, {"name": "top", "function": "max", "key": "name"}], "sort": [{"key": "n", "ascending": false}], "limit": 4}, "include": "all"}"#,
            #"{"entity": "Item", "groupBy": ["score"], "aggregates": [{"name": "n", "function": "count"}, {"name": "top", "function": "max", "key": "name"}], "sort": [{"key": "n", "ascending": false}], "limit": 4}"#
        ),
        (
            #"{"request": {"entity": "Item", "groupBy": ["score"], "aggregates": [{"name": "n", "function": "count"}], "having": "n >= 2"}, "include": "all", "coalesceMs": 3}"#,
            #"{"entity": "Item", "groupBy": ["score"], "aggregates": [{"name": "n", "function": "count"}], "having": "n >= 2"}"#
        ),
    ]

    /// A row's id: an object's `id`, or for the grouped requests (grouped by score) `group:[score]`.
    static func rowID(_ row: JSONValue, choice: Int) -> JSONValue {
        guard requests[choice].fetch.contains("groupBy") else { return row["id"] ?? .null }
        return .string("group:" + String(decoding: JSONWriter.encode([row["score"] ?? .null]), as: UTF8.self))
    }

    /// A row as a fetch answers it: a live group row without its `id` (a grouped fetch's dictionaries have none).
    static func withoutGroupID(_ row: JSONValue, choice: Int) -> JSONValue {
        guard requests[choice].fetch.contains("groupBy"), var object = row.objectValue else { return row }
        object["id"] = nil
        return .object(object)
    }

    func testRandomInterleavingsKeepTheContractsOrderAndTheDeltaOracle() throws {
        for seed in 1...6 { try run(seed: UInt64(seed)) }
    }

    private func run(seed: UInt64) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-order-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (service, outbox) = try makeCore(
            in: directory, model: ServiceCoreTests.model, keys: Self.keys, policy: Self.policy)
        defer { service.stop() }
        let seeder: [UInt8] = [8]
        request(service, seeder, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        _ = try outbox.response(1, of: seeder)
        let items = (0..<20).map { #"{"entity": "Item", "values": {"name": "i\#($0)", "score": \#($0 * 2)}}"# }
        request(service, seeder, id: 2, "store/save", #"{"inserted": [\#(items.joined(separator: ","))]}"#)
        XCTAssertEqual(try outbox.response(2, of: seeder)["result"]?["transaction"], 1)
        service.results.failToFollow(Int64(10 + seed))

        // Peers 4 and 5 hold the scoped key; the others none (as on ipc://).
        let peers: [[UInt8]] = (1...5).map { [UInt8($0)] }
        let scoped: Set<[UInt8]> = [[4], [5]]
        let operations = 80
        let sent = Mutex<[[UInt8]: [Int64: Sent]]>([:])
        DispatchQueue.concurrentPerform(iterations: peers.count) { index in
            let peer = peers[index]
            let request = { (id: Int, method: String, params: String) in
                if scoped.contains(peer) {
                    DepotTestSupport.request(service, peer, key: Self.scopedKey, id: id, method, params)
                } else {
                    DepotTestSupport.request(service, peer, id: id, method, params)
                }
            }
            var generator = SeededGenerator(seed: seed * 100 + UInt64(index))
            var log: [Int64: Sent] = [:]
            request(1, "initialize", #"{"protocolVersion": "1"}"#)
            // Two subscriptions and an observer whose ids the session waits for; later ones are
            // pipelined like the rest.
            var subscriptions: [String] = []
            for id in 2...3 {
                let choice = Int.random(in: 0..<Self.requests.count, using: &generator)
                log[Int64(id)] = .subscribe(choice)
                request(id, "results/subscribe", Self.requests[choice].subscribe)
                if let subscription = try? outbox.response(id, of: peer)["result"]?["subscription"]?.stringValue {
                    subscriptions.append(subscription)
                }
            }
            var observers: [String] = []
            let observation = Int.random(in: 0..<Self.observations.count, using: &generator)
            log[4] = .observe(observation)
            request(4, "store/observe", Self.observations[observation])
            if let observer = try? outbox.response(4, of: peer)["result"]?["observer"]?.stringValue {
                observers.append(observer)
            }
            for number in 0..<operations {
                let id = 100 + number
                let target = Int.random(in: 1...40, using: &generator)
                let subscription = subscriptions.randomElement(using: &generator) ?? "s0"
                switch Int.random(in: 0..<22, using: &generator) {
                case 0..<5:
                    // Names repeat: some inserts break the uniqueness constraint and fail.
                    let name = "n\(Int.random(in: 0..<30, using: &generator))"
                    let score = Int.random(in: 0..<40, using: &generator)
                    log[Int64(id)] = .save(score: score)
                    request(
                        id, "store/save",
                        #"{"inserted": [{"entity": "Item", "values": {"name": "\#(name)", "score": \#(score)}}]}"#)
                case 5..<10:
                    let score = [7, Int.random(in: 0..<40, using: &generator)].randomElement(using: &generator)!
                    log[Int64(id)] = .save(score: score)
                    request(
                        id, "store/save", #"{"updated": [{"id": "Item/\#(target)", "values": {"score": \#(score)}}]}"#)
                case 10..<12:
                    log[Int64(id)] = .save(score: nil)
                    request(id, "store/save", #"{"deleted": [{"id": "Item/\#(target)"}]}"#)
                case 12..<16:
                    let offset = Int.random(in: 0..<8, using: &generator)
                    // Pages are read in the lane; reads longer than `pageReadInLane` off it.
                    let length = [Int.random(in: 0..<10, using: &generator), ResultsEngine.pageReadInLane + 1]
                        .randomElement(using: &generator)!
                    log[Int64(id)] = .objects(subscription, offset: offset, length: length)
                    request(
                        id, "results/objects",
                        #"{"subscription": "\#(subscription)", "offset": \#(offset), "length": \#(length)}"#)
                case 16..<18:
                    log[Int64(id)] = .snapshot(subscription)
                    request(id, "results/snapshot", #"{"subscription": "\#(subscription)"}"#)
                case 18:
                    log[Int64(id)] = .unsubscribe(subscription)
                    request(id, "results/unsubscribe", #"{"subscription": "\#(subscription)"}"#)
                    subscriptions.removeAll { $0 == subscription }
                case 20:
                    let observation = Int.random(in: 0..<Self.observations.count, using: &generator)
                    log[Int64(id)] = .observe(observation)
                    request(id, "store/observe", Self.observations[observation])
                case 21:
                    // An unknown observer (none left) is refused: -32004.
                    let observer = observers.isEmpty ? "o0" : observers.removeFirst()
                    log[Int64(id)] = .unobserve(observer)
                    request(id, "store/unobserve", #"{"observer": "\#(observer)"}"#)
                default:
                    let choice = Int.random(in: 0..<Self.requests.count, using: &generator)
                    log[Int64(id)] = .subscribe(choice)
                    request(id, "results/subscribe", Self.requests[choice].subscribe)
                }
            }
            sent.withLock { $0[peer] = log }
        }
        // Every session's requests answered (so every save committed and was published), then each
        // live subscription's snapshot, which announces an open coalescing window first.
        var finalCount: [[UInt8]: Int] = [:]
        for peer in peers {
            let messages = try outbox.wait(for: peer) { messages in
                (100..<100 + operations).allSatisfy { id in messages.contains { $0["id"] == .int(Int64(id)) } }
            }
            var log = sent.withLock { $0[peer] ?? [:] }
            let live = Self.liveSubscriptions(in: messages, sent: log)
            for (offset, subscription) in live.enumerated() { log[Int64(1000 + offset)] = .snapshot(subscription) }
            sent.withLock { $0[peer] = log }
            finalCount[peer] = live.count
        }
        var streams: [[UInt8]: [JSONValue]] = [:]
        for peer in peers {
            let log = sent.withLock { $0[peer] ?? [:] }
            for id in 1000..<1000 + (finalCount[peer] ?? 0) {
                guard case .snapshot(let subscription)? = log[Int64(id)] else { continue }
                let params = #"{"subscription": "\#(subscription)"}"#
                if scoped.contains(peer) {
                    request(service, peer, key: Self.scopedKey, id: id, "results/snapshot", params)
                } else {
                    request(service, peer, id: id, "results/snapshot", params)
                }
            }
        }
        for peer in peers {
            streams[peer] = try outbox.wait(for: peer) { messages in
                (1000..<1000 + (finalCount[peer] ?? 0)).allSatisfy { id in
                    messages.contains { $0["id"] == .int(Int64(id)) }
                }
            }
        }
        // A fresh fetch of each request, unscoped and through the scoped key.
        var fresh: [[JSONValue]] = []
        var freshScoped: [[JSONValue]] = []
        let scopedSeeder: [UInt8] = [7]
        request(service, scopedSeeder, key: Self.scopedKey, id: 1, "initialize", #"{"protocolVersion": "1"}"#)
        _ = try outbox.response(1, of: scopedSeeder)
        for (index, pair) in Self.requests.enumerated() {
            request(service, seeder, id: 10 + index, "store/fetch", pair.fetch)
            fresh.append(try outbox.response(10 + index, of: seeder)["result"]?["objects"]?.arrayValue ?? [])
            request(service, scopedSeeder, key: Self.scopedKey, id: 10 + index, "store/fetch", pair.fetch)
            freshScoped.append(
                try outbox.response(10 + index, of: scopedSeeder)["result"]?["objects"]?.arrayValue ?? [])
        }
        for peer in peers {
            Self.replay(
                streams[peer] ?? [], sent: sent.withLock { $0[peer] ?? [:] },
                fresh: scoped.contains(peer) ? freshScoped : fresh, context: "seed \(seed), peer \(peer)")
        }
        let logs = sent.withLock { $0 }
        Self.checkObservers(
            peers.map {
                (peer: $0, scoped: scoped.contains($0), stream: outbox.placed(for: $0), sent: logs[$0] ?? [:])
            },
            context: "seed \(seed)")
    }

    /// One commit of the test's sessions, as its saving session saw it.
    private struct Commit {
        /// Its transaction.
        let transaction: Int64
        /// Where its response to the saving session was sent, among every peer's messages.
        let answered: Int
        /// The rows it left in place (inserted or updated), with their score.
        let kept: [String: Int]
    }

    /// Checks every observer of every session against every commit: it hears each commit published
    /// while it was registered (a scoped one each that put a row in its scope), before the commit's
    /// response; never of a row outside its scope; with the values the commit left; and each session
    /// receives the notifications of T before those of T+1.
    private static func checkObservers(
        _ sessions: [(peer: [UInt8], scoped: Bool, stream: [(place: Int, message: JSONValue)], sent: [Int64: Sent])],
        context: String
    ) {
        var commits: [Commit] = []
        for session in sessions {
            for (place, message) in session.stream {
                guard let id = message["id"]?.intValue, case .save(let score)? = session.sent[id],
                    let result = message["result"], let transaction = result["transaction"]?.intValue, transaction > 0
                else { continue }
                let kept = Dictionary(
                    (result["versions"]?.objectValue ?? [:]).keys.map { ($0, score ?? -1) },
                    uniquingKeysWith: { a, _ in a })
                commits.append(Commit(transaction: transaction, answered: place, kept: kept))
            }
        }
        XCTAssertEqual(Set(commits.map(\.transaction)).count, commits.count, "\(context): a transaction answered twice")
        var observerIDs: [String] = []
        for session in sessions {
            let where_ = "\(context), peer \(session.peer)"
            // When each observer was registered and removed, by the places of those answers.
            var registered: [String: (from: Int, until: Int, observation: Int)] = [:]
            var heard: [String: [Int64: (place: Int, params: JSONValue)]] = [:]
            for (place, message) in session.stream {
                if message["method"] == "store/didSave", let params = message["params"],
                    let observer = params["observer"]?.stringValue, let transaction = params["transaction"]?.intValue
                {
                    XCTAssertNil(heard[observer]?[transaction], "\(where_): \(observer) heard \(transaction) twice")
                    heard[observer, default: [:]][transaction] = (place, params)
                }
                guard let id = message["id"]?.intValue, let result = message["result"] else { continue }
                switch session.sent[id] {
                case .observe(let observation)?:
                    guard let observer = result["observer"]?.stringValue else { break }
                    registered[observer] = (place, Int.max, observation)
                    observerIDs.append(observer)
                case .unobserve(let observer)?:
                    XCTAssertEqual(result, .null, "\(where_): unobserve \(observer)")
                    registered[observer]?.until = place
                default: break
                }
            }
            for (observer, window) in registered {
                let observation = Self.observations[window.observation]
                let values = observation.contains("includeValues")
                for commit in commits where commit.answered > window.from && commit.answered < window.until {
                    let inScope = commit.kept.filter { !session.scoped || Self.inScope(score: $0.value) }
                    guard let (place, params) = heard[observer]?[commit.transaction] else {
                        XCTAssertTrue(
                            session.scoped && inScope.isEmpty,
                            "\(where_): \(observer) did not hear transaction \(commit.transaction)")
                        continue
                    }
                    XCTAssertLessThan(
                        place, commit.answered,
                        "\(where_): \(observer)'s didSave of \(commit.transaction) came after the save's response")
                    let changes = params["changes"]?["Item"]
                    let named = Set(
                        ((changes?["inserted"]?.arrayValue ?? []).compactMap(\.stringValue))
                            + (changes?["updated"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue })
                    for id in inScope.keys {
                        XCTAssertTrue(
                            named.contains(id), "\(where_): \(observer) missed \(id) in \(commit.transaction)")
                    }
                    if session.scoped {
                        for id in named {
                            XCTAssertNotNil(inScope[id], "\(where_): \(observer) heard of \(id) outside its scope")
                        }
                    }
                    if values {
                        for (id, score) in inScope {
                            XCTAssertEqual(
                                params["objects"]?[id]?["score"], .int(Int64(score)),
                                "\(where_): \(observer)'s values of \(id) in \(commit.transaction): \(params)")
                        }
                    }
                }
                for transaction in (heard[observer] ?? [:]).keys {
                    guard let commit = commits.first(where: { $0.transaction == transaction }) else { continue }
                    XCTAssertTrue(
                        commit.answered > window.from && commit.answered < window.until,
                        "\(where_): \(observer) heard \(transaction), published while it was not registered")
                }
            }
            // One order per session: the transactions its notifications name (but a coalesced window's) never
            // go back. (A save's answer may follow notifications of later transactions: a group commit
            // publishes all its saves, then answers them.)
            var latest: Int64 = 0
            var coalescing: Set<String> = []
            for (_, message) in session.stream {
                if let id = message["id"]?.intValue, case .subscribe(let choice)? = session.sent[id],
                    Self.requests[choice].subscribe.contains("coalesceMs"),
                    let subscription = message["result"]?["subscription"]?.stringValue
                {
                    coalescing.insert(subscription)
                }
                var transaction: Int64?
                if message["method"] == "store/didSave" {
                    transaction = message["params"]?["transaction"]?.intValue
                } else if message["method"] == "results/didChange",
                    let subscription = message["params"]?["subscription"]?.stringValue,
                    !coalescing.contains(subscription)
                {
                    transaction = message["params"]?["transaction"]?.intValue
                }
                guard let transaction else { continue }
                XCTAssertGreaterThanOrEqual(
                    transaction, latest,
                    "\(where_): a message of transaction \(transaction) after one of \(latest): \(message)")
                latest = max(latest, transaction)
            }
        }
        XCTAssertEqual(Set(observerIDs).count, observerIDs.count, "\(context): observer ids repeat: \(observerIDs)")
    }

    /// A request a session sent, as its client remembers it.
    enum Sent: Sendable {
        case subscribe(Int)
        case objects(String, offset: Int, length: Int)
        case snapshot(String)
        case unsubscribe(String)
        /// A save: the score it gives the row it inserts or updates (`nil`: a delete).
        case save(score: Int?)
        /// A `store/observe` with ``observations``' params at this index.
        case observe(Int)
        /// A `store/unobserve` of this observer.
        case unobserve(String)
    }

    /// The subscriptions that subscribe answers created and no unsubscribe answer ended, sorted.
    private static func liveSubscriptions(in messages: [JSONValue], sent: [Int64: Sent]) -> [String] {
        var live = Set<String>()
        for message in messages {
            guard let id = message["id"]?.intValue, let result = message["result"] else { continue }
            switch sent[id] {
            case .subscribe?: if let subscription = result["subscription"]?.stringValue { live.insert(subscription) }
            case .unsubscribe(let subscription)?: live.remove(subscription)
            default: break
            }
        }
        return live.sorted()
    }

    /// What a client holds of one subscription.
    private struct Held {
        let choice: Int
        var results: HeldResults
        /// Told to resync: its results are known again only from a snapshot's ids.
        var invalidated = false
        var resyncedIDs: [JSONValue]?
        var ended = false
    }

    /// Replays a session's stream as its client would, checking each answer against what the client holds then.
    private static func replay(_ messages: [JSONValue], sent: [Int64: Sent], fresh: [[JSONValue]], context: String) {
        var held: [String: Held] = [:]
        for message in messages {
            if let method = message["method"]?.stringValue {
                guard let params = message["params"], let subscription = params["subscription"]?.stringValue,
                    var state = held[subscription]
                else { continue }
                XCTAssertFalse(state.ended, "\(context): \(method) after \(subscription)'s unsubscribe was answered")
                if method == "results/didInvalidate" {
                    state.invalidated = true
                } else if method == "results/didChange" {
                    let seq = params["seq"]?.intValue ?? -1
                    XCTAssertEqual(seq, state.results.seq + 1, "\(context): \(subscription)'s seq has a gap")
                    // An invalidated subscription's results are known again only from a snapshot.
                    if state.invalidated {
                        state.results.seq = seq
                    } else if let problem = state.results.apply(params) {
                        XCTFail("\(context): \(subscription): \(problem)")
                    }
                }
                held[subscription] = state
                continue
            }
            guard let id = message["id"]?.intValue, let result = message["result"], let request = sent[id] else {
                continue
            }
            switch request {
            case .subscribe(let choice):
                guard let subscription = result["subscription"]?.stringValue else { continue }
                XCTAssertEqual(result["seq"], 0)
                held[subscription] = Held(
                    choice: choice,
                    results: HeldResults(subscription: subscription, objects: result["objects"]?.arrayValue ?? []))
            case .objects(let subscription, let offset, let length):
                guard let state = held[subscription] else { continue }
                XCTAssertEqual(result["seq"]?.intValue, state.results.seq, "\(context): objects \(id) out of place")
                guard !state.invalidated else { continue }
                let held = state.results.objects
                let lower = min(offset, held.count)
                let upper = min(offset + length, held.count)
                XCTAssertEqual(
                    result["objects"]?.arrayValue ?? [], Array(held[lower..<upper]),
                    "\(context): objects \(id) of \(subscription) is not what the session holds at seq \(state.results.seq)"
                )
            case .snapshot(let subscription):
                guard var state = held[subscription] else { continue }
                XCTAssertEqual(result["seq"]?.intValue, state.results.seq, "\(context): snapshot \(id) out of place")
                let ids = result["ids"]?.arrayValue ?? []
                if state.invalidated {
                    state.resyncedIDs = ids
                    held[subscription] = state
                } else {
                    XCTAssertEqual(
                        ids, state.results.objects.map { rowID($0, choice: state.choice) },
                        "\(context): snapshot \(id) of \(subscription) is not what the session holds")
                }
            case .unsubscribe(let subscription):
                held[subscription]?.ended = true
            case .save, .observe, .unobserve:
                break
            }
        }
        for (subscription, state) in held.sorted(by: { $0.key < $1.key }) where !state.ended {
            let expected = fresh[state.choice]
            if state.invalidated {
                XCTAssertEqual(
                    state.resyncedIDs, expected.map { rowID($0, choice: state.choice) },
                    "\(context): \(subscription) resynced to something else than a fresh fetch")
            } else {
                XCTAssertEqual(
                    state.results.objects.map { rowID($0, choice: state.choice) },
                    expected.map { rowID($0, choice: state.choice) },
                    "\(context): \(subscription)'s deltas applied to its first results hold other ids than a fresh fetch"
                )
                if Self.requests[state.choice].fetch.contains("groupBy") {
                    // Every live group row carries its id (DESIGN.md §7), the one the deltas name.
                    for row in state.results.objects {
                        XCTAssertEqual(row["id"], rowID(row, choice: state.choice), "\(context): a group row's id")
                    }
                }
                XCTAssertTrue(
                    state.results.objects.map { Self.withoutGroupID($0, choice: state.choice) } == expected,
                    "\(context): \(subscription)'s deltas applied to its first results hold other values than a fresh fetch"
                )
            }
        }
    }
}
