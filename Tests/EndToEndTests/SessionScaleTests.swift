import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// Many sessions on one daemon (issue 37), from one process: one ZeroMQ context,
/// a DEALER socket per session. 1,000 sessions by default (`DEPOT_SCALE_SESSIONS`
/// sets another count); it runs in well under a minute in a debug build.
final class SessionScaleTests: XCTestCase {
    /// Sessions come and go and subscribe while a writer saves: every reading
    /// session's deltas pass the oracle; then a restart, with every session
    /// back and subscribed and no delta lost.
    func testManySessionsComeGoSubscribeAndSurviveARestart() async throws {
        let count = ProcessInfo.processInfo.environment["DEPOT_SCALE_SESSIONS"].flatMap(Int.init) ?? 1000
        let daemon = try Daemon(arguments: ["--max-sessions", String(2 * count + 10)])
        let writer = try await daemon.connect(name: "writer")
        try await writer.loadItems(20)
        let request = try JSONCoding.decode(
            FetchRequest.self, from: ["entity": "Item", "sort": [["key": "name", "ascending": true]]])
        let swarm = try Swarm(endpoint: daemon.endpoint, count: count)
        try swarm.initializeAll(refusals: 0)

        // Half subscribe while the writer saves; a quarter leave and come back as new sessions.
        let saving = Task {
            for round in 0..<10 {
                _ = try await writer.call(
                    StoreSave.self,
                    .init(inserted: [
                        InsertedObject(
                            entity: "Item",
                            values: ["name": .string("new \(round)"), "createdAt": "2026-01-02T00:00:00.000Z"])
                    ]))
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let readers = Array(stride(from: 0, to: count, by: 2))
        try swarm.subscribe(readers, request: request)
        let leavers = Array(stride(from: 1, to: count, by: 4))
        try swarm.replace(leavers)
        try swarm.initialize(leavers, refusals: 0)
        try await saving.value
        let fresh = try await writer.call(StoreFetch.self, request).objects ?? []
        try swarm.readUntil(readers, match: fresh)

        // A restart on the same port: every session opens a new one and subscribes again.
        let endpoint = daemon.endpoint
        XCTAssertEqual(daemon.stop(), 0)
        let restarted = try Daemon(
            dataDirectory: daemon.dataDirectory, arguments: ["--max-sessions", String(2 * count + 10)],
            listen: endpoint)
        defer {
            restarted.stop()
            restarted.removeData()
        }
        let started = ContinuousClock.now
        try swarm.initializeAll(refusals: 0)
        try swarm.subscribe(readers, request: request)
        let back = ContinuousClock.now - started
        XCTAssertLessThan(back, .seconds(30), "\(count) sessions back and subscribed after a restart")
        let again = try await restarted.connect(name: "writer")
        for round in 0..<5 {
            _ = try await again.call(
                StoreSave.self,
                .init(inserted: [
                    InsertedObject(
                        entity: "Item",
                        values: ["name": .string("after \(round)"), "createdAt": "2026-01-03T00:00:00.000Z"])
                ]))
        }
        let after = try await again.call(StoreFetch.self, request).objects ?? []
        XCTAssertEqual(after.count, 35)
        try swarm.readUntil(readers, match: after)
        swarm.close()
    }
}

/// Many raw sessions on one context, read by one loop.
private final class Swarm {
    let context: Context
    let endpoint: String
    var sockets: [Socket]
    var mirrors: [Int: ResultsMirror] = [:]
    private var nextID = 100

    init(endpoint: String, count: Int) throws {
        context = try Context(maxSockets: Int32(2 * count + 16))
        self.endpoint = endpoint
        sockets = []
        for _ in 0..<count { sockets.append(try Self.socket(context, endpoint)) }
    }

    private static func socket(_ context: Context, _ endpoint: String) throws -> Socket {
        let socket = try Socket(context: context, type: .dealer)
        try socket.setLinger(milliseconds: 0)
        try socket.setReceiveHighWaterMark(0)
        try socket.connect(endpoint)
        return socket
    }

    /// Closes the sessions `indices` (their sockets) and opens new sockets in their place.
    func replace(_ indices: [Int]) throws {
        for index in indices {
            sockets[index].close()
            sockets[index] = try Self.socket(context, endpoint)
        }
    }

    func initializeAll(refusals: Int) throws { try initialize(Array(sockets.indices), refusals: refusals) }

    /// Sends `initialize` on each of `indices` and waits for every answer.
    func initialize(_ indices: [Int], refusals: Int) throws {
        let answers = try call(indices, method: "initialize", params: #"{"protocolVersion":"1"}"#)
        let refused = answers.values.filter { $0["error"] != nil }
        XCTAssertEqual(refused.count, refusals, "\(refused.first ?? .null)")
    }

    /// Subscribes each of `indices` to `request` (everything included) and starts its mirror.
    func subscribe(_ indices: [Int], request: FetchRequest) throws {
        let params = try JSONCoding.encodeBytes(ResultsSubscribe.Parameters(request: request, include: .all))
        let answers = try call(indices, method: "results/subscribe", params: String(decoding: params, as: UTF8.self))
        for (index, answer) in answers {
            guard let result = answer["result"] else { return XCTFail("subscribe failed: \(answer)") }
            let subscribed = try JSONCoding.decode(ResultsSubscribe.Result.self, from: result)
            mirrors[index] = ResultsMirror(subscribed, request: request, sectionKeyPath: nil)
        }
    }

    /// Sends one request on each of `indices`; returns the answers, applying any delta read meanwhile.
    private func call(_ indices: [Int], method: String, params: String) throws -> [Int: JSONValue] {
        nextID += 1
        let id = nextID
        for index in indices {
            try sockets[index].send(
                Array(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"#.utf8))
        }
        var answers: [Int: JSONValue] = [:]
        let deadline = ContinuousClock.now + .seconds(60)
        while answers.count < indices.count && ContinuousClock.now < deadline {
            var progressed = false
            for index in indices where answers[index] == nil {
                while let message = try sockets[index].receive(dontWait: true) {
                    progressed = true
                    let json = try JSONParser.parse(message.last ?? [])
                    if json["id"]?.intValue == Int64(id) {
                        // What follows the answer (a new subscription's deltas) is read once its mirror exists.
                        answers[index] = json
                        break
                    } else {
                        apply(json, at: index)
                    }
                }
            }
            if !progressed { usleep(2_000) }
        }
        XCTAssertEqual(answers.count, indices.count, "\(method): every session answered")
        return answers
    }

    private func apply(_ json: JSONValue, at index: Int) {
        guard json["method"]?.stringValue == ResultsDidChange.name, let params = json["params"],
            let change = try? JSONCoding.decode(ResultsDidChange.Parameters.self, from: params),
            mirrors[index]?.subscription == change.subscription
        else { return }
        mirrors[index]!.apply(change)
    }

    /// Reads the deltas of `indices` until every mirror equals `fresh` (the oracle), or fails after 60 s.
    func readUntil(_ indices: [Int], match fresh: [JSONValue]) throws {
        var pending = Set(indices)
        let deadline = ContinuousClock.now + .seconds(60)
        while !pending.isEmpty && ContinuousClock.now < deadline {
            var progressed = false
            for index in pending {
                while let message = try sockets[index].receive(dontWait: true) {
                    progressed = true
                    apply(try JSONParser.parse(message.last ?? []), at: index)
                }
                if mirrors[index]?.sections.flatMap(\.objects) == fresh { pending.remove(index) }
            }
            if !progressed { usleep(2_000) }
        }
        XCTAssertEqual(pending.count, 0, "every reading session's deltas give exactly a fresh fetch")
    }

    func close() {
        for socket in sockets { socket.close() }
    }

    // The sockets close before the context terminates, which would otherwise wait for them forever.
    deinit { close() }
}
