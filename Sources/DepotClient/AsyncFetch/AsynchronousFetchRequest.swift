import DepotProtocol
import Foundation

/// A fetch that runs in the background and reports progress, like
/// `NSAsynchronousFetchRequest`: a `store/fetch` with a `workDoneToken` (and
/// `countFirst`, so that the progress has a total).
///
/// ```swift
/// let request = AsynchronousFetchRequest(fetchRequest: FetchRequest(entity: "Item", batchSize: 500)) { result in
///     switch result.result {
///     case .success(let items): print(items.count)
///     case .failure(let error): print(error.isCancellation ? "cancelled" : "\(error)")
///     }
/// }
/// let running = connection.execute(request)
/// running.progress.completedUnitCount  // follows the daemon's $/progress reports
/// running.progress.cancel()            // sends $/cancelRequest
/// ```
public struct AsynchronousFetchRequest<Object: FetchRequestResult>: Sendable {
    /// The fetch to run; its `workDoneToken` and `countFirst` are set when it starts.
    public var fetchRequest: FetchRequest
    /// Called once with the objects or the error (a cancellation error after `cancel()`), on no
    /// particular thread, before ``AsynchronousFetchResult/value`` returns.
    public var completionBlock: (@Sendable (AsynchronousFetchResult<Object>) -> Void)?

    /// Creates a request.
    public init(
        fetchRequest: FetchRequest, completionBlock: (@Sendable (AsynchronousFetchResult<Object>) -> Void)? = nil
    ) {
        self.fetchRequest = fetchRequest
        self.completionBlock = completionBlock
    }
}

extension DepotConnection {
    /// Starts `request` and returns at once; its ``AsynchronousFetchResult/progress``
    /// follows the daemon's reports and cancels the fetch.
    @discardableResult
    public func execute<Object>(_ request: AsynchronousFetchRequest<Object>) -> AsynchronousFetchResult<Object> {
        let running = AsynchronousFetchResult<Object>(connection: self, request: request)
        running.start()
        return running
    }

    /// Fetches `request`'s objects as `Object` (``DepotObject`` by default).
    /// `progress`, when given, follows the daemon's `$/progress` reports, and
    /// cancelling it (or the task) cancels the fetch with a cancellation error.
    public func fetch<Object: FetchRequestResult>(
        _ request: FetchRequest, as type: Object.Type = DepotObject.self, progress: Progress? = nil
    ) async throws(DepotClientError) -> [Object] {
        let running = AsynchronousFetchResult<Object>(
            connection: self, request: AsynchronousFetchRequest(fetchRequest: request), progress: progress)
        let result = await withTaskCancellationHandler {
            running.start()
            return await running.outcome()
        } onCancel: {
            running.cancel()
        }
        return try result.get()
    }
}
