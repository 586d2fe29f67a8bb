import DepotProtocol
import Foundation
import Synchronization

/// A running or finished ``AsynchronousFetchRequest``, like
/// `NSPersistentStoreAsynchronousResult`.
public final class AsynchronousFetchResult<Object: FetchRequestResult>: Sendable {
    /// Follows the daemon's `$/progress`: `totalUnitCount` from the count
    /// (begin), `completedUnitCount` from each report. `cancel()` cancels the fetch.
    public let progress: Progress
    /// The request.
    public let request: AsynchronousFetchRequest<Object>

    private let connection: DepotConnection
    private let requestID: RequestID
    private let token: JSONValue
    private let outcome = Mutex<Result<[Object], DepotClientError>?>(nil)
    private let waiters = Mutex<[CheckedContinuation<Result<[Object], DepotClientError>, Never>]>([])

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

    /// Cancels the fetch (the same as `progress.cancel()`).
    public func cancel() { progress.cancel() }

    /// Waits for the objects; throws the fetch's error.
    public var value: [Object] {
        get async throws(DepotClientError) { try await outcome().get() }
    }

    /// Waits for the outcome.
    func outcome() async -> Result<[Object], DepotClientError> {
        await withCheckedContinuation { continuation in
            let finished = outcome.withLock { outcome in
                if outcome == nil { waiters.withLock { $0.append(continuation) } }
                return outcome
            }
            if let finished { continuation.resume(returning: finished) }
        }
    }

    func start() {
        var fetchRequest = request.fetchRequest
        fetchRequest.workDoneToken = token
        fetchRequest.countFirst = true
        // Registered before the request is sent, so that `begin` cannot be missed.
        let notifications = connection.notifications()
        let listener = Task { [progress, token] in
            for await notification in notifications {
                guard let params = notification.decode(ProgressNotification.self), params.token == token,
                    let value = try? JSONCoding.decode(WorkDoneProgress.self, from: params.value)
                else { continue }
                if let total = value.total { progress.totalUnitCount = total }
                if let completed = value.completed { progress.completedUnitCount = completed }
                if value.kind == .end { break }
            }
        }
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
                        objects.append(try Object(depotObject: raw))
                    } catch {
                        throw .invalidResponse("\(raw.id) cannot be made into \(Object.self): \(error)")
                    }
                }
                if progress.totalUnitCount < 0 { progress.totalUnitCount = Int64(objects.count) }
                progress.completedUnitCount = Int64(objects.count)
                result = .success(objects)
            } catch {
                result = .failure(error)
            }
            listener.cancel()
            finish(result)
        }
    }

    private func finish(_ result: Result<[Object], DepotClientError>) {
        let waiting = outcome.withLock { outcome in
            outcome = result
            return waiters.withLock { waiters in
                defer { waiters.removeAll() }
                return waiters
            }
        }
        // The completion block runs before waiting tasks resume, so `value` returning means it ran.
        request.completionBlock?(self)
        waiting.forEach { $0.resume(returning: result) }
    }
}
