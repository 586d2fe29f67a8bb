import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest
import ZeroMQ

/// Sessions at the daemon's limits (DESIGN.md §12): a listen queue sized for a
/// reconnect storm, an open-file limit that lowers `--max-sessions` loudly
/// instead of leaving clients unanswered, and a slot freed as soon as its
/// client's connection closes.
final class SessionLimitTests: XCTestCase {
    func testListenBacklogAndLimitsAreInStats() throws {
        let daemon = try Daemon(arguments: ["--max-sessions", "6000", "--io-threads", "2"])
        let client = try RawClient(endpoint: daemon.endpoint)
        try client.initialize()
        let server = try client.call("server/stats")["result"]?["server"]
        XCTAssertEqual(server?["listenBacklog"], 6000, "room for every session to reconnect at once")
        XCTAssertEqual(server?["ioThreads"], 2)
        XCTAssertEqual(server?["maxSessions"], 6000, "the test runner's limit affords 6000 sessions")
        XCTAssertNil(server?["maxSessionsRequested"], "present only when lowered")
        XCTAssertEqual(server?["sessionCount"], 1)
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }

    /// With 256 open files and `--max-sessions 1000`, 300 clients connecting at once
    /// each get a session or -32017; none waits unanswered, and the daemon is idle after.
    func testLowOpenFileLimitServesOrRefusesEveryClient() throws {
        let daemon = try Daemon(arguments: ["--max-sessions", "1000"], logFile: logFile(), openFileLimit: 256)
        defer { daemon.removeData() }
        let probe = try RawClient(endpoint: daemon.endpoint)
        try probe.initialize()
        let server = try XCTUnwrap(try probe.call("server/stats")["result"]?["server"])
        let limit = Int(try XCTUnwrap(server["maxSessions"]?.intValue))
        XCTAssertLessThan(limit, 256, "lowered to what 256 descriptors afford")
        XCTAssertGreaterThan(limit, 100)
        XCTAssertEqual(server["maxSessionsRequested"], 1000)
        XCTAssertEqual(server["openFileLimit"], 256)
        XCTAssertTrue(daemon.log.contains("serving at most \(limit) sessions"), daemon.log)

        let context = try Context()
        let clients = 300
        var sockets: [Socket?] = try (0..<clients).map { _ in
            let socket = try Socket(context: context, type: .dealer)
            try socket.setLinger(milliseconds: 0)
            try socket.connect(daemon.endpoint)
            try socket.send(
                Array(#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1"}}"#.utf8))
            return socket
        }
        var served: [Int] = []
        var refused = 0
        let deadline = ContinuousClock.now + .seconds(45)
        while served.count + refused < clients && ContinuousClock.now < deadline {
            var progressed = false
            for index in sockets.indices {
                guard let socket = sockets[index], let message = try socket.receive(dontWait: true) else { continue }
                progressed = true
                let answer = try JSONParser.parse(message.last ?? [])
                if answer["result"]?["sessionId"] != nil {
                    served.append(index)
                } else {
                    XCTAssertEqual(answer["error"]?["code"], -32017, "\(answer)")
                    XCTAssertEqual(answer["error"]?["data"]?["limit"], "maxSessions")
                    // A refused client goes away, as the clients do, freeing its descriptor.
                    socket.close()
                    sockets[index] = nil
                    refused += 1
                }
            }
            if !progressed { usleep(10_000) }
        }
        XCTAssertEqual(served.count + refused, clients, "every client is answered; none hangs")
        XCTAssertEqual(served.count, limit - 1, "every place below the lowered limit is served (the probe has one)")
        // The sessions served work.
        for index in served.prefix(20) {
            try sockets[index]!.send(Array(#"{"jsonrpc":"2.0","id":2,"method":"model/get"}"#.utf8))
        }
        for index in served.prefix(20) {
            try sockets[index]!.setReceiveTimeout(milliseconds: 5000)
            let answer = try JSONParser.parse(try XCTUnwrap(try sockets[index]!.receive()).last ?? [])
            XCTAssertNotNil(answer["result"], "\(answer)")
        }
        // No busy loop once the storm is over.
        let before = daemon.cpuSeconds
        sleep(2)
        XCTAssertLessThan(daemon.cpuSeconds - before, 0.4, "the daemon is idle after the storm")
        for socket in sockets { socket?.close() }
        XCTAssertEqual(daemon.stop(), 0)
    }

    /// At the session limit, a client whose connection closes frees its place at
    /// once, not three heartbeat intervals (30 s here) later.
    func testClosedConnectionFreesItsSlotAtOnce() throws {
        let daemon = try Daemon(arguments: ["--max-sessions", "2"])
        defer { daemon.removeData() }
        let first = try RawClient(endpoint: daemon.endpoint)
        try first.initialize()
        var second: RawClient? = try RawClient(endpoint: daemon.endpoint)
        try second!.initialize()
        let third = try RawClient(endpoint: daemon.endpoint)
        XCTAssertEqual(try third.call("initialize", #"{"protocolVersion":"1"}"#)["error"]?["code"], -32017)
        second = nil  // the client process vanishes: its TCP connection closes
        let started = ContinuousClock.now
        var answer: JSONValue = .null
        for attempt in 2..<200 {
            answer = try third.call("initialize", #"{"protocolVersion":"1"}"#, id: attempt)
            if answer["result"] != nil { break }
            usleep(20_000)
        }
        XCTAssertNotNil(answer["result"]?["sessionId"], "\(answer)")
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(3), "freed at once, not after 30 s")
        XCTAssertNil(try first.call("model/get")["error"], "the other session is untouched")
        XCTAssertEqual(daemon.stop(), 0)
    }

    private func logFile() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("depot-limits-\(UUID().uuidString).log")
    }
}
