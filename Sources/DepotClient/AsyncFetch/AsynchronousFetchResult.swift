import DepotProtocol
import Foundation
import Synchronization

/// A running or finished ``AsynchronousFetchRequest``, like
/// `NSPersistentStoreAsynchronousResult`.
public final class AsynchronousFetchResult<Object: Decodable & Sendable>: Sendable {
    /// Follows the daemon's `$/progress`: `totalUnitCount` from the count
    /// (begin), `completedUnitCount` from each report. `cancel()` cancels the fetch.
    public let progress: Progress
    /// The request.
    public let request: AsynchronousFetchRequest<Object>

    private let connection: DepotConnection
    private let requestID: RequestID
    private let token: JSONValue
    private let outcome = Mutex<Result<[Object], DepotClientError>?>(nil)
    /// The outcome once the completion block has run, and who waits for it.
    private let delivered = Mutex<
        (
            outcome: Result<[Object], DepotClientError>?,
            waiters: [CheckedContinuation<Result<[Object], DepotClientError>, Never>]
        )
    >((nil, []))
    private let partialToken: JSONValue
    private let broadcaster = ProgressBroadcaster()
    private let arrivals = ObjectArrivals<Object>()

    init(connection: DepotConnection, request: AsynchronousFetchRequest<Object>, progress: Progress? = nil) {
        self.connection = connection
        self.request = request
        self.requestID = connection.makeRequestID()
        self.token = .string("fetch-\(UUID().uuidString)")
        self.partialToken = .string("objects-\(UUID().uuidString)")
        self.progress = progress ?? Progress(totalUnitCount: -1)
        let id = requestID
        self.progress.cancellationHandler = { [connection] in connection.cancel(id) }
    }

    /// The objects, once the fetch succeeded.
    public var finalResult: [Object]? { try? outcome.withLock { $0 }?.get() }

    /// The error, once the fetch failed (``DepotClientError/isCancellation`` after a cancel).
    public var operationError: DepotClientError? {
        guard case .failure(let error) = outcome.withLock({ $0 }) else { return nil }
        return error
    }

    /// The outcome, once finished.
    public var result: Result<[Object], DepotClientError>? { outcome.withLock { $0 } }

    /// Every progress step from now on (the latest one first), ending with the
    /// update whose ``FetchProgress/isFinished`` is true. An `AsyncSequence`, so
    /// it works where key-value observing of `progress` does not (Linux):
    ///
    /// ```swift
    /// for await update in running.progressUpdates { print(update.fractionCompleted ?? 0) }
    /// ```
    ///
    /// Each use returns an independent stream.
    public var progressUpdates: AsyncStream<FetchProgress> { broadcaster.stream }

    /// The objects as they arrive, in order, while the fetch runs: the daemon
    /// streams them in chunks of the request's `batchSize` (`partialResultToken`),
    /// so a fetch of any size starts showing before it ends and is never refused
    /// by the daemon's cap on a single answer. Ends after the last object, or
    /// throws the fetch's error (a cancellation error after ``cancel()``).
    ///
    /// ```swift
    /// let running = try await connection.execute(AsynchronousFetchRequest(fetchRequest: request))
    /// for try await item in running.objects { index(item) }
    /// ```
    ///
    /// Each use starts from the first object, however late it begins; ``value``
    /// is the whole array at the end.
    public var objects: AsynchronousFetchObjects<Object> { AsynchronousFetchObjects(arrivals: arrivals) }

    /// Cancels the fetch (the same as `progress.cancel()`).
    public func cancel() { progress.cancel() }

    /// Waits for the objects; throws the fetch's error.
    public var value: [Object] {
        get async throws(DepotClientError) { try await outcome().get() }
    }

    /// Waits for the outcome (after the completion block has run).
    func outcome() async -> Result<[Object], DepotClientError> {
        await withCheckedContinuation { continuation in
            let finished = delivered.withLock { delivered in
                if delivered.outcome == nil { delivered.waiters.append(continuation) }
                return delivered.outcome
            }
            if let finished { continuation.resume(returning: finished) }
        }
    }

    func start() {
        var fetchRequest = request.fetchRequest
        fetchRequest.workDoneToken = token
        fetchRequest.countFirst = true
        // Objects stream in `$/progress` chunks, so no size cap applies (DESIGN.md §8), unless the
        // caller streams them under a token of their own or asked for something else than objects.
        let streaming =
            fetchRequest.partialResultToken == nil && (fetchRequest.resultType ?? .objects) == .objects
        if streaming { fetchRequest.partialResultToken = partialToken }
        // Registered before the request is sent, so that `begin` and the first chunk cannot be missed.
        let listener = broadcaster.follow(connection, token: token, into: progress)
        let chunks =
            streaming ? gatherChunks(from: connection.partialResults(token: partialToken.stringValue ?? "")) : nil
        let dictionaries = fetchRequest.answersDictionaries
        Task { [self] in
            let result: Result<[Object], DepotClientError>
            do throws(DepotClientError) {
                if progress.isCancelled { throw .server(.cancelled) }
                let json: JSONValue
                do {
                    json = try JSONCoding.encode(fetchRequest)
                } catch {
                    throw .invalidResponse("could not encode the request: \(error)")
                }
                let answer: JSONValue
                do throws(DepotClientError) {
                    answer = try await connection.call(
                        id: requestID, method: StoreFetch.name, params: json, timeout: .seconds(3600))
                } catch {
                    chunks?.cancel()
                    // An object that could not be made into `Object` cancelled the fetch: say why.
                    if let failure = chunks?.state.withLock({ $0.failure }) { throw failure }
                    throw error
                }
                let fetched = try DepotConnection.decode(StoreFetch.Result.self, answer)
                let count: Int
                if let chunks {
                    // Every chunk came before the answer; wait until the gatherer has taken them all.
                    count = fetched.count ?? 0
                    let caughtUp = chunks.state.withLock { state in
                        state.expected = count
                        return state.received >= count || state.failure != nil
                    }
                    if caughtUp { chunks.cancel() }
                    await chunks.finished()
                    let (received, failure) = chunks.state.withLock { ($0.received, $0.failure) }
                    if let failure { throw failure }
                    guard received == count else {
                        throw .invalidResponse("the fetch streamed \(received) objects but reported \(count)")
                    }
                } else {
                    var objects: [Object] = []
                    for json in fetched.objects ?? [] {
                        objects.append(try Self.object(from: json, dictionaries: dictionaries))
                    }
                    count = objects.count
                    arrivals.append(objects)
                }
                if progress.totalUnitCount < 0 { progress.totalUnitCount = Int64(count) }
                progress.completedUnitCount = Int64(count)
                broadcaster.publish(completed: Int64(count), total: progress.totalUnitCount)
                result = .success(arrivals.all)
            } catch {
                result = .failure(error)
            }
            chunks?.cancel()  // stops a gatherer still waiting when the fetch failed before it ran
            listener.cancel()
            finish(result)
        }
    }

    /// What the chunk gatherer has seen: objects received, the count the answer reported, a failure.
    struct ChunkState {
        var received = 0
        var expected: Int?
        var failure: DepotClientError?
    }

    /// The chunk gatherer's task and what it has seen.
    final class ChunkGatherer: Sendable {
        let state = Mutex(ChunkState())
        let task: Mutex<Task<Void, Never>?> = Mutex(nil)

        func cancel() { task.withLock { $0 }?.cancel() }
        func finished() async { await task.withLock { $0 }?.value }
    }

    /// Takes the partial-result chunks from `chunks`, decodes their objects straight from the
    /// message bytes into `Object`s and hands them on as they arrive, until the count the
    /// answer reported, or cancellation (every chunk comes before the answer).
    private func gatherChunks(from chunks: AsyncStream<PartialResultChunk>) -> ChunkGatherer {
        let gatherer = ChunkGatherer()
        let (arrivals, connection, requestID) = (self.arrivals, self.connection, self.requestID)
        let dictionaries = request.fetchRequest.answersDictionaries
        let task = Task {
            for await chunk in chunks {
                let batch: [Object]
                do throws(DepotClientError) {
                    batch = try chunk.objects(as: Object.self, dictionaries: dictionaries)
                } catch {
                    gatherer.state.withLock { $0.failure = error }
                    connection.cancel(requestID)
                    break
                }
                arrivals.append(batch)
                let done = gatherer.state.withLock { state in
                    state.received += batch.count
                    return state.expected.map { state.received >= $0 } ?? false
                }
                if done { break }
            }
        }
        gatherer.task.withLock { $0 = task }
        return gatherer
    }

    /// One fetched object as `Object`; with `dictionaries` (a grouped fetch, or
    /// `resultType: dictionaries`), a dictionary decoded as `Object` (not a ``DepotObject``: it has no id).
    private static func object(from json: JSONValue, dictionaries: Bool) throws(DepotClientError) -> Object {
        if dictionaries {
            guard Object.self != DepotObject.self else {
                throw .invalidResponse(
                    "a grouped fetch (or resultType dictionaries) returns dictionaries, not objects: fetch them as [String: JSONValue] or a Decodable type of yours"
                )
            }
            do {
                return try DepotObject.decode(Object.self, from: json)
            } catch {
                throw .invalidResponse("\(json.excerpt()) cannot be made into \(Object.self): \(error)")
            }
        }
        let raw = try DepotObject(json: json)
        do {
            return try Object.make(from: raw)
        } catch {
            throw .invalidResponse("\(raw.id) cannot be made into \(Object.self): \(error)")
        }
    }

    private func finish(_ result: Result<[Object], DepotClientError>) {
        outcome.withLock { $0 = result }
        // The completion block runs before waiting tasks resume and before the progress
        // updates end, so `value` returning (or the updates ending) means it ran.
        request.completionBlock?(self)
        let waiting = delivered.withLock { delivered in
            delivered.outcome = result
            defer { delivered.waiters.removeAll() }
            return delivered.waiters
        }
        broadcaster.publish(finished: true)
        if case .failure(let error) = result { arrivals.finish(failure: error) } else { arrivals.finish(failure: nil) }
        waiting.forEach { $0.resume(returning: result) }
    }
}
