import CZeroMQ
import Glibc
import Synchronization

/// A thread-safe FIFO that wakes a ``Poller``: the hand-off into the one
/// thread that owns a socket.
///
/// Producers ``post(_:)`` from any thread; the owner adds ``wakeDescriptor``
/// to its poller and calls ``drain()`` when it is readable. The queue is FIFO
/// across all producers, so a producer that posts A then B has them taken in
/// that order.
///
/// The wake-up is one `eventfd` (non-blocking, close-on-exec): a wake-up is one
/// `write` that adds to its counter, and ``drain()`` clears every wake-up since
/// the last one with one `read`, however many there were (a pipe needs a
/// descriptor per end and a read per 256 wake-ups). Only a post into an empty
/// queue wakes: the owner takes the whole queue at each drain, so later posts
/// ride on the wake-up that is pending.
public final class Mailbox<Element: Sendable>: Sendable {
    private let queue = Mutex<[Element]>([])
    /// The descriptor to poll: readable while a wake-up is pending.
    public let wakeDescriptor: Int32

    /// Creates an empty mailbox with its wake-up `eventfd`.
    public init() {
        let descriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        precondition(descriptor >= 0, "eventfd() failed: out of file descriptors (errno \(errno))")
        wakeDescriptor = descriptor
    }

    deinit {
        close(wakeDescriptor)
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
        // Fails only when the counter would pass 2^64 - 2 (it is then readable anyway) or on EINTR.
        while eventfd_write(wakeDescriptor, 1) != 0, errno == EINTR {}
    }

    /// Takes everything queued (owner thread).
    ///
    /// The wake-up is cleared before the queue is taken, so a post that lands
    /// after the read either is taken now or has woken the descriptor again:
    /// none is left waiting without a wake-up.
    public func drain() -> [Element] {
        var pending: eventfd_t = 0
        while eventfd_read(wakeDescriptor, &pending) != 0, errno == EINTR {}  // EAGAIN: nothing pending.
        return queue.withLock { queue in
            let taken = queue
            queue.removeAll(keepingCapacity: true)
            return taken
        }
    }

    /// How many elements wait.
    public var count: Int { queue.withLock { $0.count } }
}
