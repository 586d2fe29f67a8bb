import Glibc
import Synchronization

/// A thread-safe FIFO that wakes a ``Poller``: the hand-off into the one
/// thread that owns a socket.
///
/// Producers ``post(_:)`` from any thread; the owner adds ``wakeDescriptor``
/// to its poller and calls ``drain()`` when it is readable. The queue is FIFO
/// across all producers, so a producer that posts A then B has them taken in
/// that order.
public final class Mailbox<Element: Sendable>: Sendable {
    private let queue = Mutex<[Element]>([])
    /// The descriptor to poll: readable while elements are waiting.
    public let wakeDescriptor: Int32
    private let pokeDescriptor: Int32

    /// Creates an empty mailbox with its wake-up pipe.
    public init() {
        var ends: [Int32] = [0, 0]
        precondition(pipe(&ends) == 0, "pipe() failed: out of file descriptors")
        for descriptor in ends {
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        wakeDescriptor = ends[0]
        pokeDescriptor = ends[1]
    }

    deinit {
        close(wakeDescriptor)
        close(pokeDescriptor)
    }

    /// Queues `element` and wakes the owner.
    public func post(_ element: Element) {
        let wasEmpty = queue.withLock { queue in
            queue.append(element)
            return queue.count == 1
        }
        if wasEmpty { wake() }
    }

    /// Queues several elements in order, with no other producer's in between.
    public func post(contentsOf elements: [Element]) {
        guard !elements.isEmpty else { return }
        let wasEmpty = queue.withLock { queue in
            let empty = queue.isEmpty
            queue.append(contentsOf: elements)
            return empty
        }
        if wasEmpty { wake() }
    }

    /// Wakes the owner without queueing anything (to make it stop, say).
    public func wake() {
        var byte: UInt8 = 1
        _ = write(pokeDescriptor, &byte, 1)
    }

    /// Takes everything queued (owner thread).
    public func drain() -> [Element] {
        var sink = [UInt8](repeating: 0, count: 256)
        while read(wakeDescriptor, &sink, sink.count) == sink.count {}
        return queue.withLock { queue in
            let taken = queue
            queue.removeAll(keepingCapacity: true)
            return taken
        }
    }

    /// How many elements wait.
    public var count: Int { queue.withLock { $0.count } }
}
