import Foundation
import Glibc
import XCTest

@testable import ZeroMQ

/// The mailbox's wake-up (one `eventfd`): coalesced, consumed by a drain, never lost.
final class MailboxTests: XCTestCase {
    /// Whether the wake descriptor is readable now.
    private func isAwake<Element>(_ mailbox: Mailbox<Element>) throws -> Bool {
        var poller = Poller()
        let index = poller.add(fileDescriptor: mailbox.wakeDescriptor)
        return try poller.poll(timeoutMilliseconds: 0)[index].contains(.readable)
    }

    func testOneDescriptorThatIsAnEventfd() throws {
        let mailbox = Mailbox<Int>()
        let link = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(mailbox.wakeDescriptor)")
        XCTAssertEqual(link, "anon_inode:[eventfd]")
        XCTAssertNotEqual(fcntl(mailbox.wakeDescriptor, F_GETFL) & O_NONBLOCK, 0, "a drain never blocks")
        XCTAssertNotEqual(fcntl(mailbox.wakeDescriptor, F_GETFD) & FD_CLOEXEC, 0, "not inherited by children")
    }

    func testWakeUpsCoalesceAndOneDrainConsumesThem() throws {
        let mailbox = Mailbox<Int>()
        XCTAssertFalse(try isAwake(mailbox))
        XCTAssertEqual(mailbox.drain(), [], "a drain with nothing pending neither blocks nor invents elements")
        for value in 0..<1000 { mailbox.post(value) }
        mailbox.wake()
        mailbox.wake()
        XCTAssertTrue(try isAwake(mailbox))
        XCTAssertEqual(mailbox.drain(), Array(0..<1000))
        XCTAssertFalse(try isAwake(mailbox), "one drain clears every wake-up before it")
        mailbox.wake()
        XCTAssertTrue(try isAwake(mailbox), "a bare wake-up (stop) wakes the owner")
        XCTAssertEqual(mailbox.drain(), [])
        XCTAssertFalse(try isAwake(mailbox))
    }

    /// Four producers post while the owner polls and drains: every element
    /// arrives, in each producer's order, and the owner never waits on a
    /// descriptor that should be readable (a lost wake-up would time the poll out).
    func testNoWakeUpIsLostUnderConcurrentProducers() throws {
        let mailbox = Mailbox<(producer: Int, value: Int)>()
        let producers = 4
        let perProducer = 20_000
        let group = DispatchGroup()
        for producer in 0..<producers {
            DispatchQueue.global().async(group: group) {
                for value in 0..<perProducer {
                    if value % 7 == 0 {
                        mailbox.post(contentsOf: [(producer, value)])
                    } else {
                        mailbox.post((producer, value))
                    }
                }
            }
        }
        var poller = Poller()
        let index = poller.add(fileDescriptor: mailbox.wakeDescriptor)
        var next = Array(repeating: 0, count: producers)
        var received = 0
        while received < producers * perProducer {
            let ready = try poller.poll(timeoutMilliseconds: 5000)
            XCTAssertTrue(ready[index].contains(.readable), "a wake-up was lost with \(mailbox.count) elements waiting")
            guard ready[index].contains(.readable) else { break }
            for element in mailbox.drain() {
                XCTAssertEqual(element.value, next[element.producer], "producer \(element.producer) out of order")
                next[element.producer] = element.value + 1
                received += 1
            }
        }
        group.wait()
        XCTAssertEqual(received, producers * perProducer)
        XCTAssertEqual(mailbox.count, 0)
    }
}
