import Foundation
import Logging
import Synchronization
import XCTest
import ZeroMQ

@testable import DepotServer

/// The transport's order (DESIGN.md §7): per peer, messages go out in the
/// order queued; across peers, an answer does not wait behind a broadcast to others.
final class TransportOrderTests: XCTestCase {
    /// Notes which peers said hello.
    private final class Greeted: TransportDelegate {
        let peers = Mutex<Set<[UInt8]>>([])
        func transport(
            _ transport: RouterTransport, didReceive payload: [UInt8], from routingID: [UInt8], keyID: String?,
            moreWaiting: Bool
        ) { _ = peers.withLock { $0.insert(routingID) } }
        func transport(_ transport: RouterTransport, peerVanished routingID: [UInt8]) {}
        func transport(_ transport: RouterTransport, didDrain routingID: [UInt8]) {}
        func transportDidTick(_ transport: RouterTransport) {}
    }

    func testAnAnswerIsNotQueuedBehindAFanOutToOthers() throws {
        let transport = try RouterTransport(
            endpoints: ["tcp://127.0.0.1:*"], maxMessageSize: -1, sendHighWaterMark: 0, logger: Logger(label: "test"))
        let greeted = Greeted()
        transport.delegate = greeted
        transport.start()
        defer { transport.stop() }
        let context = try Context()
        func dealer(_ name: String) throws -> Socket {
            let socket = try Socket(context: context, type: .dealer)
            try socket.setRoutingID(Array(name.utf8))
            try socket.setLinger(milliseconds: 0)
            try socket.setReceiveHighWaterMark(0)
            try socket.setReceiveTimeout(milliseconds: 20_000)
            try socket.connect(transport.lastEndpoint)
            try socket.send(Array("hello".utf8))
            return socket
        }
        let listeners = try (0..<40).map { try dealer("listener\($0)") }
        let asker = try dealer("asker")
        let deadline = ContinuousClock.now + .seconds(20)
        while greeted.peers.withLock({ $0.count }) < 41 && ContinuousClock.now < deadline { usleep(5_000) }
        XCTAssertEqual(greeted.peers.withLock { $0.count }, 41)

        // A broadcast of 2,500 messages to each listener, then an answer to the asker
        // and one more message to the first listener.
        let perListener = 2_500
        var fanOut: [(bytes: [UInt8], peer: [UInt8])] = []
        for sequence in 0..<perListener {
            for index in listeners.indices {
                fanOut.append(
                    (Array("\(sequence) \(String(repeating: "x", count: 80))".utf8), Array("listener\(index)".utf8)))
            }
        }
        let before = transport.messagesSent
        transport.send(contentsOf: fanOut)
        transport.send(Array("answer".utf8), to: Array("asker".utf8))
        transport.send(Array("last".utf8), to: Array("listener0".utf8))
        XCTAssertEqual(try asker.receive(), [Array("answer".utf8)])
        let sentWhenAnswered = transport.messagesSent - before
        XCTAssertLessThan(
            sentWhenAnswered, fanOut.count / 2, "the asker's answer went out long before the broadcast's last delivery")

        // Per peer, the order queued: every fan-out message in sequence, then the later one.
        for (index, listener) in listeners.enumerated() {
            for sequence in 0..<perListener {
                let frame = try XCTUnwrap(try listener.receive()?.last)
                let number = String(decoding: frame.prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)
                guard number == String(sequence) else {
                    return XCTFail("listener\(index) got \(number) where \(sequence) was due")
                }
            }
            if index == 0 { XCTAssertEqual(try listener.receive(), [Array("last".utf8)]) }
        }
        for socket in listeners + [asker] { socket.close() }
    }
}
