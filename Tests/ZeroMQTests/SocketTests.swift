import Foundation
import XCTest

@testable import ZeroMQ

final class SocketTests: XCTestCase {
    func roundTrip(_ endpoint: String) throws {
        let context = try Context()
        let router = try Socket(context: context, type: .router)
        try router.setRouterMandatory(true)
        try router.setLinger(milliseconds: 0)
        try router.bind(endpoint)
        let bound = try router.lastEndpoint()
        let dealer = try Socket(context: context, type: .dealer)
        try dealer.setLinger(milliseconds: 0)
        try dealer.setReceiveTimeout(milliseconds: 5000)
        try router.setReceiveTimeout(milliseconds: 5000)
        try dealer.connect(bound)

        try dealer.send([Array("hello".utf8), [0, 1, 2]])
        let received = try XCTUnwrap(try router.receive())
        XCTAssertEqual(received.count, 3, "routing id + two frames")
        XCTAssertEqual(received[1], Array("hello".utf8))
        XCTAssertEqual(received[2], [0, 1, 2])
        try router.send([received[0], Array("world".utf8)])
        XCTAssertEqual(try dealer.receive(), [Array("world".utf8)])

        // ROUTER_MANDATORY: a send to an unknown peer fails instead of vanishing.
        XCTAssertThrowsError(try router.send([Array("nobody".utf8), [1]])) { error in
            XCTAssertTrue((error as? ZMQError)?.isHostUnreachable == true, "\(error)")
        }
        dealer.close()
        router.close()
    }

    func testRoundTripOverInproc() throws { try roundTrip("inproc://socket-tests") }

    func testRoundTripOverTCP() throws { try roundTrip("tcp://127.0.0.1:*") }

    func testNonBlockingReceiveAndPoller() throws {
        let context = try Context()
        let pull = try Socket(context: context, type: .pull)
        try pull.bind("inproc://poller")
        let push = try Socket(context: context, type: .push)
        try push.connect("inproc://poller")
        XCTAssertNil(try pull.receive(dontWait: true))
        let mailbox = Mailbox<Int>()
        var poller = Poller()
        let socketIndex = poller.add(pull)
        let mailboxIndex = poller.add(fileDescriptor: mailbox.wakeDescriptor)
        XCTAssertEqual(try poller.poll(timeoutMilliseconds: 0), [[], []])
        mailbox.post(contentsOf: [1, 2])
        mailbox.post(3)
        try push.send([9])
        let ready = try poller.poll(timeoutMilliseconds: 1000)
        XCTAssertTrue(ready[mailboxIndex].contains(.readable))
        XCTAssertEqual(mailbox.drain(), [1, 2, 3])
        XCTAssertEqual(mailbox.count, 0)
        let again = try poller.poll(timeoutMilliseconds: 1000)
        XCTAssertTrue(again[socketIndex].contains(.readable))
        XCTAssertEqual(try pull.receive(dontWait: true), [[9]])
        XCTAssertFalse(
            try poller.poll(timeoutMilliseconds: 0)[mailboxIndex].contains(.readable), "drain consumed the wake-up")
    }

    func testMaxMessageSizeDropsOversizedInput() throws {
        let context = try Context()
        let router = try Socket(context: context, type: .router)
        try router.setMaxMessageSize(1024)
        try router.setReceiveTimeout(milliseconds: 300)
        try router.bind("tcp://127.0.0.1:*")
        let dealer = try Socket(context: context, type: .dealer)
        let identity = Array("oversized-sender".utf8)
        try dealer.setRoutingID(identity)
        try dealer.setLinger(milliseconds: 0)
        try dealer.connect(try router.lastEndpoint())
        try dealer.send([UInt8](repeating: 7, count: 4096))
        // The port is ephemeral: a client of an earlier test's daemon that had it may still
        // reconnect and send its heartbeat here. Only this dealer's message must never arrive.
        var received = 0
        while received < 100, let message = try router.receive() {
            received += 1
            XCTAssertNotEqual(message.first, identity, "over ZMQ_MAXMSGSIZE: never delivered")
        }
        try router.setLinger(milliseconds: 0)
    }

    func testErrorsDescribeThemselves() throws {
        let context = try Context()
        let socket = try Socket(context: context, type: .dealer)
        XCTAssertThrowsError(try socket.bind("nonsense://x")) { error in
            XCTAssertTrue("\(error)".contains("bind nonsense://x"), "\(error)")
        }
        XCTAssertGreaterThanOrEqual(libraryVersion.major, 4)
    }
}

final class ListenOptionTests: XCTestCase {
    func testBacklogAndIOThreadsAreSet() throws {
        let context = try Context(ioThreads: 2)
        XCTAssertEqual(context.ioThreads, 2)
        let router = try Socket(context: context, type: .router)
        try router.setLinger(milliseconds: 0)
        XCTAssertEqual(try router.backlog(), 100, "libzmq's default, which drops a storm of connects")
        try router.setBacklog(4096)
        XCTAssertEqual(try router.backlog(), 4096)
        router.close()
    }
}
