import Foundation
import Synchronization

/// Hands every element it is given to each of its listeners' `AsyncStream`s.
///
/// Each ``stream()`` is independent and unbounded; it leaves the broadcaster when its
/// consumer stops listening, and ends at ``finish()``.
final class Broadcaster<Element: Sendable>: Sendable {
    private let continuations = Mutex<[UUID: AsyncStream<Element>.Continuation]>([:])

    /// A new stream of every element from now on, after `first` when given.
    func stream(startingWith first: Element? = nil) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .unbounded)
        let key = UUID()
        if let first { continuation.yield(first) }
        continuations.withLock { $0[key] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.continuations.withLock { $0.removeValue(forKey: key) }
        }
        return stream
    }

    /// Gives `element` to every stream.
    func yield(_ element: Element) {
        for continuation in continuations.withLock({ Array($0.values) }) {
            continuation.yield(element)
        }
    }

    /// Ends every stream made so far.
    func finish() {
        // Finished outside the lock: finishing runs onTermination, which takes it.
        let ended = continuations.withLock { continuations in
            defer { continuations.removeAll() }
            return Array(continuations.values)
        }
        ended.forEach { $0.finish() }
    }
}
