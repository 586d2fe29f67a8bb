import DepotProtocol
import Foundation
import Synchronization

/// One step of a long operation (an asynchronous fetch, a batch insert, update
/// or delete), as its `progressUpdates` sequence delivers it: the daemon's
/// `$/progress` reports for the operation's `workDoneToken`.
public struct OperationProgress: Sendable, Hashable {
    /// Objects done so far.
    public var completed: Int64
    /// How many objects the operation will do; `nil` until the daemon knows.
    public var total: Int64?
    /// Whether the operation has finished (the last update; also after a failure or a cancel).
    public var isFinished: Bool

    /// `completed / total`, or `nil` without a total.
    public var fractionCompleted: Double? {
        guard let total, total > 0 else { return total == 0 && isFinished ? 1 : nil }
        return min(1, Double(completed) / Double(total))
    }
}

/// The progress of an asynchronous fetch.
public typealias FetchProgress = OperationProgress

/// Hands each progress step to every `progressUpdates` stream (the latest one
/// first to a new stream) and to a Foundation `Progress`.
final class ProgressBroadcaster: Sendable {
    private let state = Mutex<
        (latest: OperationProgress, streams: [UUID: AsyncStream<OperationProgress>.Continuation])
    >(
        (OperationProgress(completed: 0, total: nil, isFinished: false), [:]))

    /// Every step from now on, the latest first, ending with the finished one.
    var stream: AsyncStream<OperationProgress> {
        let (stream, continuation) = AsyncStream.makeStream(of: OperationProgress.self, bufferingPolicy: .unbounded)
        let key = UUID()
        // Yield and finish outside the lock: finishing runs `onTermination`, which takes it.
        let latest = state.withLock { state in
            if !state.latest.isFinished { state.streams[key] = continuation }
            return state.latest
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.streams[key] = nil } }
        continuation.yield(latest)
        if latest.isFinished { continuation.finish() }
        return stream
    }

    /// Records a step and tells every stream.
    func publish(completed: Int64? = nil, total: Int64? = nil, finished: Bool = false) {
        let (latest, streams) = state.withLock { state in
            if let completed { state.latest.completed = completed }
            if let total { state.latest.total = total }
            if finished { state.latest.isFinished = true }
            defer { if finished { state.streams.removeAll() } }
            return (state.latest, Array(state.streams.values))
        }
        for continuation in streams {
            continuation.yield(latest)
            if finished { continuation.finish() }
        }
    }

    /// Follows the `$/progress` reports for `token` into the streams and `progress`,
    /// until the `end` report or cancellation. Call it before sending the request.
    func follow(_ connection: DepotConnection, token: JSONValue, into progress: Progress? = nil) -> Task<Void, Never> {
        let notifications = connection.notifications()
        return Task { [weak self] in
            for await notification in notifications {
                guard let params = notification.decode(ProgressNotification.self), params.token == token,
                    let value = try? JSONCoding.decode(WorkDoneProgress.self, from: params.value)
                else { continue }
                if let total = value.total { progress?.totalUnitCount = total }
                if let completed = value.completed { progress?.completedUnitCount = completed }
                if value.total != nil || value.completed != nil {
                    self?.publish(completed: value.completed, total: value.total)
                }
                if value.kind == .end { break }
            }
        }
    }
}

/// Parameters that take a `workDoneToken`, so that the daemon reports progress.
public protocol WorkDoneProgressParameters: Encodable, Sendable {
    /// The token of the `$/progress` reports.
    var workDoneToken: JSONValue? { get set }
}

extension BatchInsert.Parameters: WorkDoneProgressParameters {}
extension BatchUpdate.Parameters: WorkDoneProgressParameters {}
extension BatchDelete.Parameters: WorkDoneProgressParameters {}

/// A running batch operation (`store/batchInsert`, `batchUpdate`, `batchDelete`),
/// like an `NSBatchInsertRequest` executed in the background: its progress as an
/// `AsyncSequence`, its result, and `cancel()`.
///
/// ```swift
/// let running = try await connection.start(BatchInsert.self, .init(entity: "Item", objects: rows))
/// for await update in running.progressUpdates { print(update.completed, "of", update.total ?? 0) }
/// let result = try await running.value  // inserted, updated, ignored, transaction
/// ```
public final class RunningOperation<M: Method>: Sendable where M.Parameters: WorkDoneProgressParameters {
    /// Follows the daemon's reports, as a Foundation `Progress`; `cancel()` cancels the operation.
    public let progress: Progress
    private let broadcaster = ProgressBroadcaster()
    private let task: Task<M.Result, any Error>

    init(connection: DepotConnection, parameters: M.Parameters) {
        var parameters = parameters
        let token = JSONValue.string("op-\(UUID().uuidString)")
        parameters.workDoneToken = token
        let id = connection.makeRequestID()
        let progress = Progress(totalUnitCount: -1)
        progress.cancellationHandler = { [connection] in connection.cancel(id) }
        self.progress = progress
        let broadcaster = self.broadcaster
        let listener = broadcaster.follow(connection, token: token, into: progress)
        let params = parameters
        task = Task {
            defer {
                listener.cancel()
                broadcaster.publish(finished: true)
            }
            let json: JSONValue
            do {
                json = try JSONCoding.encode(params)
            } catch {
                throw DepotClientError.invalidResponse("could not encode the request: \(error)")
            }
            let answer = try await connection.call(id: id, method: M.name, params: json, timeout: .seconds(3600))
            // The daemon sends the `end` report before the answer, so it is already on its way to the
            // listener: let the listener take it (bounded, should the daemon have sent none) before
            // the progress is marked finished, or the last count could be lost.
            await Self.settle(listener, within: .seconds(2))
            return try DepotConnection.decode(M.Result.self, answer)
        }
    }

    /// Waits for `listener` to end, at most `limit`.
    private static func settle(_ listener: Task<Void, Never>, within limit: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await listener.value }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Every progress step from now on (the latest one first), ending with the
    /// one whose ``OperationProgress/isFinished`` is true. Each use returns an independent stream.
    public var progressUpdates: AsyncStream<OperationProgress> { broadcaster.stream }

    /// Waits for the result; throws the operation's error (a cancellation error after ``cancel()``).
    public var value: M.Result {
        get async throws(DepotClientError) {
            do {
                return try await task.value
            } catch let error as DepotClientError {
                throw error
            } catch {
                throw .invalidResponse("\(error)")
            }
        }
    }

    /// Cancels the operation (`$/cancelRequest`); the daemon rolls it back.
    public func cancel() { progress.cancel() }
}

extension DepotConnection {
    /// Starts a batch operation with progress reports and returns at once.
    ///
    /// - Throws: ``DepotClientError/closed`` when the connection is closed; the
    ///   operation's own errors come from ``RunningOperation/value``.
    public func start<M: Method>(_ method: M.Type, _ parameters: M.Parameters) async throws(DepotClientError)
        -> RunningOperation<M> where M.Parameters: WorkDoneProgressParameters
    {
        if isClosed { throw .closed }
        return RunningOperation(connection: self, parameters: parameters)
    }
}
