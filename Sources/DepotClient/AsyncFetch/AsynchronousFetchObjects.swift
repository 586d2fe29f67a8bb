import Foundation
import Synchronization

/// The objects of an ``AsynchronousFetchResult`` as they arrive: an
/// `AsyncSequence` of `Object` that ends after the last one, or throws the
/// fetch's error. Each iteration starts from the first object.
///
/// ```swift
/// for try await item in running.objects { print(item.id) }
/// ```
public struct AsynchronousFetchObjects<Object: Decodable & Sendable>: AsyncSequence, Sendable {
    /// One object.
    public typealias Element = Object
    /// The fetch's error.
    public typealias Failure = DepotClientError

    let arrivals: ObjectArrivals<Object>

    /// Iterates the objects received so far, then the rest as they arrive.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(chunks: arrivals.chunks().makeAsyncIterator()) }

    /// Iterates the objects of one ``AsynchronousFetchObjects``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var chunks: AsyncStream<ObjectArrivals<Object>.Chunk>.Iterator
        var buffer: [Object] = []
        var index = 0

        /// The next object; `nil` after the last one.
        ///
        /// - Throws: the fetch's error, after the objects that came before it.
        public mutating func next() async throws(DepotClientError) -> Object? {
            try await next(isolation: nil)
        }

        /// The next object, staying on `actor`; `nil` after the last one.
        ///
        /// - Throws: the fetch's error, after the objects that came before it.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(DepotClientError) -> Object? {
            while index == buffer.count {
                switch await chunks.next(isolation: actor) {
                case nil:
                    return nil
                case .objects(let objects):
                    buffer = objects
                    index = 0
                case .failure(let error):
                    throw error
                }
            }
            defer { index += 1 }
            return buffer[index]
        }
    }
}

/// Keeps the objects of a streaming fetch as they arrive and hands them to
/// every iteration of ``AsynchronousFetchObjects`` (what came before first).
final class ObjectArrivals<Object: Sendable>: Sendable {
    /// What an iteration receives: a batch of objects, or the fetch's error.
    enum Chunk: Sendable {
        case objects([Object])
        case failure(DepotClientError)
    }

    private struct State {
        var objects: [Object] = []
        var finished = false
        var failure: DepotClientError?
        var streams: [UUID: AsyncStream<Chunk>.Continuation] = [:]
    }

    private let state = Mutex(State())

    /// Every object received so far.
    var all: [Object] { state.withLock { $0.objects } }

    /// A stream of the objects received so far (one chunk), then each new chunk, then the end.
    func chunks() -> AsyncStream<Chunk> {
        let (stream, continuation) = AsyncStream.makeStream(of: Chunk.self, bufferingPolicy: .unbounded)
        let key = UUID()
        // Yielding inside the lock keeps the order with `append`; finishing must happen outside
        // it, because finishing runs `onTermination`, which takes the lock.
        let ended = state.withLock { state -> (failure: DepotClientError?, ended: Bool) in
            if !state.objects.isEmpty { continuation.yield(.objects(state.objects)) }
            if !state.finished { state.streams[key] = continuation }
            return (state.failure, state.finished)
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.streams[key] = nil } }
        if ended.ended {
            if let failure = ended.failure { continuation.yield(.failure(failure)) }
            continuation.finish()
        }
        return stream
    }

    /// Adds a batch and hands it to every stream.
    func append(_ batch: [Object]) {
        guard !batch.isEmpty else { return }
        state.withLock { state in
            state.objects.append(contentsOf: batch)
            for continuation in state.streams.values { continuation.yield(.objects(batch)) }
        }
    }

    /// Ends every stream, with `failure` when the fetch failed.
    func finish(failure: DepotClientError?) {
        let streams = state.withLock { state in
            state.finished = true
            state.failure = failure
            defer { state.streams.removeAll() }
            return Array(state.streams.values)
        }
        for continuation in streams {
            if let failure { continuation.yield(.failure(failure)) }
            continuation.finish()
        }
    }
}
