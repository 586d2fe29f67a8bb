import DepotProtocol
import DepotServer
import Foundation
import Synchronization

/// An ``Outbox`` that keeps every message the core sends, by peer, in order,
/// and lets a test wait for the ones it expects: the harness of the server
/// core's tests, which drive it in memory, without a socket or a process.
public final class RecordingOutbox: Outbox {
    private let condition = NSCondition()
    // Guarded by `condition`.
    nonisolated(unsafe) private var messages: [[UInt8]: [JSONValue]] = [:]
    /// Each recorded message's place among every peer's, in the order they were sent (as `messages`).
    nonisolated(unsafe) private var places: [[UInt8]: [Int]] = [:]
    nonisolated(unsafe) private var sent = 0

    /// A new outbox that has recorded nothing.
    public init() {}

    public func send(_ bytes: [UInt8], to peer: [UInt8]) {
        let message = (try? JSONParser.parse(bytes)) ?? .string("unparsable: \(bytes.count) bytes")
        condition.lock()
        messages[peer, default: []].append(message)
        places[peer, default: []].append(sent)
        sent += 1
        condition.broadcast()
        condition.unlock()
    }

    public func backlogCount(for peer: [UInt8]) -> Int { 0 }

    /// Everything sent to `peer` so far.
    public func received(by peer: [UInt8]) -> [JSONValue] {
        condition.lock()
        defer { condition.unlock() }
        return messages[peer] ?? []
    }

    /// Everything sent to `peer` so far, each with its place among the messages sent to every
    /// peer (a message with a lower place was sent before, whoever it was for).
    public func placed(for peer: [UInt8]) -> [(place: Int, message: JSONValue)] {
        condition.lock()
        defer { condition.unlock() }
        return Array(zip(places[peer] ?? [], messages[peer] ?? [])).map { (place: $0, message: $1) }
    }

    /// Waits until `peer` has received a message that satisfies `test`; returns all it received by then.
    public func wait(
        for peer: [UInt8], timeout: Double = 10, file: StaticString = #filePath, line: UInt = #line,
        until test: ([JSONValue]) -> Bool
    ) throws -> [JSONValue] {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !test(messages[peer] ?? []) {
            guard condition.wait(until: deadline) else {
                throw TimeoutError(description: "peer \(peer) received only \(messages[peer] ?? [])")
            }
        }
        return messages[peer] ?? []
    }

    /// Waits for the response to request `id` of `peer`.
    public func response(_ id: Int, of peer: [UInt8]) throws -> JSONValue {
        let all = try wait(for: peer) { $0.contains { $0["id"] == .int(Int64(id)) } }
        return all.first { $0["id"] == .int(Int64(id)) }!
    }

    /// The messages a test waited for did not come.
    public struct TimeoutError: Error, CustomStringConvertible {
        public let description: String
    }
}

/// Sends one JSON-RPC request to the core as `peer`.
public func request(_ service: DepotService, _ peer: [UInt8], id: Int, _ method: String, _ params: String) {
    service.receive(Array(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"#.utf8), from: peer)
}
