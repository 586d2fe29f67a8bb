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
    private let broadcaster = ProgressBroadcaster()

    init(connection: DepotConnection, request: AsynchronousFetchRequest<Object>, progress: Progress? = nil) {
        self.connection = connection
        self.request = request
        self.requestID = connection.makeRequestID()
        self.token = .string("fetch-\(UUID().uuidString)")
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
        // Registered before the request is sent, so that `begin` cannot be missed.
        let listener = broadcaster.follow(connection, token: token, into: progress)
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
                let answer = try await connection.call(
                    id: requestID, method: StoreFetch.name, params: json, timeout: .seconds(3600))
                let fetched = try DepotConnection.decode(StoreFetch.Result.self, answer)
                var objects: [Object] = []
                for json in fetched.objects ?? [] {
                    let raw = try DepotObject(json: json)
                    do {
                        objects.append(try Object.make(from: raw))
                    } catch {
                        throw .invalidResponse("\(raw.id) cannot be made into \(Object.self): \(error)")
                    }
                }
                if progress.totalUnitCount < 0 { progress.totalUnitCount = Int64(objects.count) }
                progress.completedUnitCount = Int64(objects.count)
                broadcaster.publish(completed: Int64(objects.count), total: progress.totalUnitCount)
                result = .success(objects)
            } catch {
                result = .failure(error)
            }
            listener.cancel()
            finish(result)
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
        waiting.forEach { $0.resume(returning: result) }
    }
}
