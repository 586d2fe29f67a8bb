import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// One order per session (DESIGN.md §7), checked message by message on a raw
/// socket while another connection runs batches and saves: a subscription's
/// first `results/didChange` follows its subscribe response, nothing follows
/// its unsubscribe response, and every `results/objects` and
/// `results/snapshot` answer is a consistent read placed where its `seq` says.
final class SessionOrderTests: XCTestCase {
    static let entity = EntityDescription(
        name: "Entry",
        attributes: [
            AttributeDescription(name: "score", type: .integer),
            AttributeDescription(name: "label", type: .string),
        ])

    func testEveryAnswerSitsWhereItsSeqSays() throws {
        let daemon = try Daemon()
        let setup = try RawClient(endpoint: daemon.endpoint)
        try setup.initialize()
        let model = String(
            decoding: try JSONCoding.encodeBytes(ModelDefine.Parameters(entities: [Self.entity])), as: UTF8.self)
        XCTAssertNotNil(try setup.call("model/define", model)["result"])
        XCTAssertNotNil(try setup.call("store/batchInsert", Self.batch(from: 0, count: 400))["result"])

        let stop = SharedFlag(false)
        let writer = Thread { Self.write(to: daemon.endpoint, until: stop) }
        writer.start()
        defer { stop.set(true) }

        let watcher = try RawClient(endpoint: daemon.endpoint)
        try watcher.initialize()
        var checker = OrderChecker()
        var generator = SeededGenerator(seed: 18)
        var nextID = 100
        let deadline = Date().addingTimeInterval(6)
        while Date() < deadline {
            // Keep a few requests in flight, of every kind the rules speak of.
            for _ in 0..<3 {
                nextID += 1
                let live = checker.live.sorted()
                switch Int.random(in: 0..<10, using: &generator) {
                case 0...1 where live.count < 5 || live.isEmpty:
                    let request = FetchRequest(
                        entity: "Entry", predicate: "score >= %@",
                        arguments: [.int(Int64.random(in: 0..<300, using: &generator))],
                        sort: [SortDescriptor(key: "score"), SortDescriptor(key: "label")])
                    checker.pending[nextID] = .subscribe(request)
                    let params = ResultsSubscribe.Parameters(request: request, include: .all)
                    try watcher.send(Self.request(nextID, ResultsSubscribe.name, params))
                case 2 where !live.isEmpty:
                    let subscription = live.randomElement(using: &generator)!
                    checker.pending[nextID] = .unsubscribe(subscription)
                    try watcher.send(
                        Self.request(
                            nextID, ResultsUnsubscribe.name, ResultsUnsubscribe.Parameters(subscription: subscription)))
                case 3 where !live.isEmpty:
                    let subscription = live.randomElement(using: &generator)!
                    checker.pending[nextID] = .snapshot(subscription)
                    try watcher.send(
                        Self.request(
                            nextID, ResultsSnapshot.name, ResultsSnapshot.Parameters(subscription: subscription)))
                default:
                    guard let subscription = live.randomElement(using: &generator) else { continue }
                    let offset = Int.random(in: 0..<60, using: &generator)
                    checker.pending[nextID] = .objects(subscription, offset: offset)
                    try watcher.send(
                        Self.request(
                            nextID, ResultsObjects.name,
                            ResultsObjects.Parameters(subscription: subscription, offset: offset, length: 40)))
                }
            }
            while !checker.pending.isEmpty {
                checker.receive(try watcher.receive())
            }
        }
        stop.set(true)
        XCTAssertEqual(checker.violations, [], "\(checker.violations.count) messages out of place")
        XCTAssertGreaterThan(checker.counts["didChange", default: 0], 50, "\(checker.counts)")
        XCTAssertGreaterThan(checker.counts["objects", default: 0], 50, "\(checker.counts)")
        XCTAssertGreaterThan(checker.counts["snapshot", default: 0], 5, "\(checker.counts)")
        XCTAssertGreaterThan(checker.counts["unsubscribe", default: 0], 5, "\(checker.counts)")
    }

    /// Batches, deletes and single saves until `stop`.
    static func write(to endpoint: String, until stop: SharedFlag<Bool>) {
        guard let client = try? RawClient(endpoint: endpoint), (try? client.initialize()) != nil else { return }
        var generator = SeededGenerator(seed: 7)
        var next = 10_000
        while !stop.value {
            switch Int.random(in: 0..<4, using: &generator) {
            case 0:
                _ = try? client.call("store/batchInsert", batch(from: next, count: 150))
                next += 150
            case 1:
                let low = Int.random(in: 0..<300, using: &generator)
                _ = try? client.call(
                    "store/batchDelete", #"{"entity":"Entry","predicate":"score BETWEEN {\#(low), \#(low + 20)}"}"#)
            case 2:
                let low = Int.random(in: 0..<300, using: &generator)
                _ = try? client.call(
                    "store/batchUpdate",
                    #"{"entity":"Entry","predicate":"score BETWEEN {\#(low), \#(low + 30)}","values":{"label":"u\#(next)"}}"#
                )
                next += 1
            default:
                let score = Int.random(in: 0..<300, using: &generator)
                _ = try? client.call(
                    "store/save", #"{"inserted":[{"entity":"Entry","values":{"score":\#(score),"label":"s\#(next)"}}]}"#
                )
                next += 1
            }
        }
    }

    static func batch(from start: Int, count: Int) -> String {
        let objects = (start..<start + count).map { #"{"score":\#($0 % 300),"label":"b\#($0)"}"# }
        return #"{"entity":"Entry","objects":[\#(objects.joined(separator: ","))]}"#
    }

    static func request<P: Encodable>(_ id: Int, _ method: String, _ params: P) throws -> String {
        let body = String(decoding: try JSONCoding.encodeBytes(params), as: UTF8.self)
        return #"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(body)}"#
    }
}

/// Follows one session's stream and records every message that breaks §7's order.
struct OrderChecker {
    enum Pending {
        case subscribe(FetchRequest)
        case unsubscribe(String)
        case snapshot(String)
        case objects(String, offset: Int)
    }

    var pending: [Int: Pending] = [:]
    var mirrors: [String: ResultsMirror] = [:]
    var closed: Set<String> = []
    var invalidated: Set<String> = []
    var violations: [String] = []
    var counts: [String: Int] = [:]

    /// Subscriptions whose subscribe was answered and whose unsubscribe was not sent.
    var live: Set<String> {
        let leaving = pending.values.compactMap { if case .unsubscribe(let id) = $0 { id } else { nil } }
        return Set(mirrors.keys).subtracting(leaving)
    }

    mutating func receive(_ message: JSONValue) {
        if let method = message["method"]?.stringValue {
            return notification(method, message["params"] ?? .null)
        }
        guard let id = message["id"]?.intValue, let request = pending.removeValue(forKey: Int(id)) else {
            return violations.append("an answer to no pending request: \(message.excerpt())")
        }
        guard let result = message["result"] else {
            // A subscription invalidated and dropped may answer not-found; nothing else may fail.
            if message["error"]?["code"]?.intValue != Int64(ErrorCode.notFound.rawValue) {
                violations.append("error \(message.excerpt())")
            }
            return
        }
        do {
            switch request {
            case .subscribe(let fetch):
                let answer = try JSONCoding.decode(ResultsSubscribe.Result.self, from: result)
                if closed.contains(answer.subscription) || mirrors[answer.subscription] != nil {
                    violations.append("a didChange for \(answer.subscription) came before its subscribe answer")
                }
                mirrors[answer.subscription] = ResultsMirror(answer, request: fetch, sectionKeyPath: nil)
                counts["subscribe", default: 0] += 1
            case .unsubscribe(let subscription):
                mirrors[subscription] = nil
                closed.insert(subscription)
                counts["unsubscribe", default: 0] += 1
            case .snapshot(let subscription):
                let answer = try JSONCoding.decode(ResultsSnapshot.Result.self, from: result)
                guard let mirror = mirrors[subscription] else { return }
                if answer.seq != mirror.seq {
                    violations.append("snapshot of \(subscription) at seq \(answer.seq) after \(mirror.seq)")
                }
                if answer.ids != mirror.ids { violations.append("snapshot of \(subscription) differs from its deltas") }
                counts["snapshot", default: 0] += 1
            case .objects(let subscription, let offset):
                let answer = try JSONCoding.decode(ResultsObjects.Result.self, from: result)
                guard let mirror = mirrors[subscription] else { return }
                if answer.seq != mirror.seq {
                    violations.append("objects of \(subscription) at seq \(answer.seq) after \(mirror.seq)")
                }
                let expected = Array(mirror.objects.dropFirst(offset).prefix(40))
                if answer.objects.contains(.null) { violations.append("objects of \(subscription) carry null rows") }
                if answer.objects != expected {
                    violations.append(
                        "objects of \(subscription) at \(offset) are not the results at seq \(answer.seq)")
                }
                counts["objects", default: 0] += 1
            }
        } catch {
            violations.append("undecodable answer: \(error)")
        }
    }

    private mutating func notification(_ method: String, _ params: JSONValue) {
        guard let subscription = params["subscription"]?.stringValue, !invalidated.contains(subscription) else {
            return
        }
        if closed.contains(subscription) {
            return violations.append("\(method) for \(subscription) after its unsubscribe answer")
        }
        guard mirrors[subscription] != nil else {
            // Not answered yet: remembered so that the answer shows it came first.
            closed.insert(subscription)
            return violations.append("\(method) for \(subscription) before its subscribe answer")
        }
        switch method {
        case ResultsDidChange.name:
            guard let change = try? JSONCoding.decode(ResultsDidChange.Parameters.self, from: params) else {
                return violations.append("undecodable didChange")
            }
            if change.seq != mirrors[subscription]!.seq + 1 {
                violations.append("seq \(change.seq) after \(mirrors[subscription]!.seq) for \(subscription)")
            }
            mirrors[subscription]!.apply(change)
            counts["didChange", default: 0] += 1
        case ResultsDidInvalidate.name:
            // Out of the check from here on (a resync would start a new mirror).
            mirrors[subscription] = nil
            invalidated.insert(subscription)
            counts["invalidate", default: 0] += 1
        default:
            break
        }
    }
}

extension ResultsMirror {
    /// Every object in order.
    var objects: [JSONValue] { sections.flatMap(\.objects) }
    /// Every id in order.
    var ids: [String] { objects.compactMap { $0["id"]?.stringValue } }
}

/// A flag shared with a writer thread.
final class SharedFlag<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func set(_ value: Value) { lock.withLock { stored = value } }
    /// Changes the value under the lock.
    func mutate(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}
