import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// The limits a user sets (`--max-sessions`, `--max-subscriptions-per-session`,
/// `--max-in-flight-per-session`): beyond them -32017 naming the limit, and
/// other sessions go on unaffected.
final class LimitsTests: XCTestCase {
    func testSessionLimit() throws {
        let daemon = try Daemon(arguments: ["--max-sessions", "2"])
        let first = try RawClient(endpoint: daemon.endpoint)
        try first.initialize()
        let second = try RawClient(endpoint: daemon.endpoint)
        try second.initialize()
        let third = try RawClient(endpoint: daemon.endpoint)
        let refused = try third.call("initialize", #"{"protocolVersion":"1"}"#)
        XCTAssertEqual(refused["error"]?["code"], -32017)
        XCTAssertEqual(refused["error"]?["data"]?["limit"], "maxSessions")
        XCTAssertTrue(refused["error"]?["message"]?.stringValue?.contains("--max-sessions") == true)
        XCTAssertEqual(try third.call("ping")["result"], [:], "ping still works without a session")
        XCTAssertNil(try first.call("model/get")["error"], "the open sessions are unaffected")
        // A session that ends frees its place.
        XCTAssertEqual(try second.call("disconnect")["result"], .null)
        try third.initialize()
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }

    func testSubscriptionLimitPerSession() async throws {
        let daemon = try Daemon(arguments: ["--max-subscriptions-per-session", "2"])
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        client.abort()
        let raw = try RawClient(endpoint: daemon.endpoint)
        try raw.initialize()
        let subscribe = #"{"request":{"entity":"Team","sort":[{"key":"teamName"}]},"include":"none"}"#
        let first = try raw.call("results/subscribe", subscribe, id: 1)["result"]?["subscription"]?.stringValue
        XCTAssertNotNil(first)
        XCTAssertNotNil(try raw.call("results/subscribe", subscribe, id: 2)["result"])
        let refused = try raw.call("results/subscribe", subscribe, id: 3)
        XCTAssertEqual(refused["error"]?["code"], -32017)
        XCTAssertEqual(refused["error"]?["data"]?["limit"], "maxSubscriptionsPerSession")
        // An unsubscribe frees a place, and a subscribe that fails does not take it.
        XCTAssertEqual(try raw.call("results/unsubscribe", #"{"subscription":"\#(first!)"}"#, id: 4)["result"], .null)
        XCTAssertEqual(
            try raw.call("results/subscribe", #"{"request":{"entity":"Ghost","sort":[{"key":"x"}]}}"#, id: 5)["error"]?[
                "code"], -32602)
        XCTAssertNotNil(try raw.call("results/subscribe", subscribe, id: 6)["result"]?["subscription"])
        XCTAssertEqual(try raw.call("results/subscribe", subscribe, id: 7)["error"]?["code"], -32017)
        // Another session has its own allowance.
        let other = try RawClient(endpoint: daemon.endpoint)
        try other.initialize()
        XCTAssertNotNil(try other.call("results/subscribe", subscribe)["result"]?["subscription"])
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }

    func testInFlightLimitPerSession() async throws {
        let daemon = try Daemon(arguments: ["--max-in-flight-per-session", "3"])
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        client.abort()
        let raw = try RawClient(endpoint: daemon.endpoint)
        try raw.initialize()
        // A big batch keeps the writer busy; twenty saves sent behind it wait for it.
        // With room for three in flight, the batch and two saves are taken, the rest refused at once.
        let objects = (0..<20_000).map { #"{"name":"n\#($0)","createdAt":"2026-01-01T00:00:00.000Z"}"# }
        try raw.send(
            #"{"jsonrpc":"2.0","id":1000,"method":"store/batchInsert","params":{"entity":"Item","objects":[\#(objects.joined(separator: ","))]}}"#
        )
        let save =
            #"{"inserted":[{"entity":"Item","values":{"name":"single","createdAt":"2026-01-01T00:00:00.000Z"}}]}"#
        for id in 1...20 {
            try raw.send(#"{"jsonrpc":"2.0","id":\#(id),"method":"store/save","params":\#(save)}"#)
        }
        var answered = 0
        var overloaded = 0
        while answered < 21 {
            let response = try raw.receive()
            guard response["id"] != nil else { continue }
            answered += 1
            if response["error"]?["code"] == -32017 {
                overloaded += 1
                XCTAssertEqual(response["error"]?["data"]?["limit"], "maxInFlightPerSession")
            } else {
                XCTAssertNil(response["error"], "\(response)")
            }
        }
        XCTAssertEqual(overloaded, 18, "the batch and two saves were taken")
        // What was refused left nothing behind.
        XCTAssertEqual(try raw.call("store/count", #"{"entity":"Item"}"#, id: 98)["result"]?["count"], 20_002)
        // Once answered, the session may send again, and another session was never limited.
        XCTAssertNil(try raw.call("store/count", #"{"entity":"Team"}"#, id: 99)["error"])
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }

    /// A MATCHES that backtracks without end is stopped after its budget with
    /// -32602 naming the pattern; the reader is free again and the daemon answers.
    func testRunawayRegularExpressionIsStoppedWithAClearError() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        client.abort()
        let raw = try RawClient(endpoint: daemon.endpoint)
        try raw.initialize()
        let name = String(repeating: "a", count: 40) + "!"
        XCTAssertNil(
            try raw.call(
                "store/save",
                #"{"inserted":[{"entity":"Item","values":{"name":"\#(name)","createdAt":"2026-01-01T00:00:00.000Z"}}]}"#
            )["error"])
        let started = ContinuousClock.now
        let response = try raw.call("store/fetch", #"{"entity":"Item","predicate":"name MATCHES '(a+)+$'"}"#, id: 2)
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(5))
        XCTAssertEqual(response["error"]?["code"], -32602, "\(response)")
        XCTAssertEqual(response["error"]?["data"]?["field"], "predicate")
        let message = response["error"]?["message"]?.stringValue ?? ""
        XCTAssertTrue(message.contains("(a+)+$") && message.contains("longer than"), message)
        // A harmless MATCHES on the same value works, and the daemon goes on.
        XCTAssertEqual(
            try raw.call("store/count", #"{"entity":"Item","predicate":"name MATCHES 'a+!'"}"#, id: 3)["result"]?[
                "count"], 1)
        XCTAssertEqual(try raw.call("ping", id: 4)["result"], [:])
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }

    func testLimitsMustBePositive() throws {
        XCTAssertThrowsError(try Daemon(arguments: ["--max-sessions", "0"])) { error in
            XCTAssertTrue("\(error)".contains("--max-sessions must be at least 1"), "\(error)")
        }
    }
}
