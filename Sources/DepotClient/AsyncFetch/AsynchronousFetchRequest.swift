import DepotProtocol
import Foundation

/// A fetch that runs in the background and reports progress, like
/// `NSAsynchronousFetchRequest`: a `store/fetch` with a `workDoneToken` (and
/// `countFirst`, so that the progress has a total) whose objects stream in
/// chunks of `batchSize` (`partialResultToken`), so a fetch of any size works:
/// the daemon's cap on one answer (`--max-fetch-objects`) does not apply.
/// The result hands out the objects as they arrive
/// (``AsynchronousFetchResult/objects``, an `AsyncSequence`) and the whole
/// array at the end (``AsynchronousFetchResult/value``).
///
/// ```swift
/// let request = AsynchronousFetchRequest(fetchRequest: FetchRequest(entity: "Item", batchSize: 500)) { result in
///     switch result.result {
///     case .success(let items): print(items.count)
///     case .failure(let error): print(error.isCancellation ? "cancelled" : "\(error)")
///     default: break
///     }
/// }
/// let running = try await connection.execute(request)
/// for await update in running.progressUpdates {  // works on Linux too (no key-value observing needed)
///     print(update.completed, "of", update.total ?? -1)
/// }
/// for try await item in running.objects { print(item.id) }  // as they arrive
/// running.cancel()                                // sends $/cancelRequest
/// let items = try await running.value
/// ```
///
/// Without a type, the objects are ``DepotObject``s; for your own `Decodable`
/// type write `AsynchronousFetchRequest(fetchRequest: request, as: Team.self) { ... }`.
public struct AsynchronousFetchRequest<Object: Decodable & Sendable>: Sendable {
    /// The fetch to run; its `workDoneToken` and `countFirst` are set when it starts.
    public var fetchRequest: FetchRequest
    /// Called once with the objects or the error (a cancellation error after `cancel()`), on no
    /// particular thread, before ``AsynchronousFetchResult/value`` returns.
    public var completionBlock: (@Sendable (AsynchronousFetchResult<Object>) -> Void)?

    /// Creates a request whose objects are `type` (your `Decodable` type, or ``DepotObject``).
    public init(
        fetchRequest: FetchRequest, as type: Object.Type,
        completionBlock: (@Sendable (AsynchronousFetchResult<Object>) -> Void)? = nil
    ) {
        self.fetchRequest = fetchRequest
        self.completionBlock = completionBlock
    }
}

extension AsynchronousFetchRequest where Object == DepotObject {
    /// Creates a request whose objects are ``DepotObject``s.
    public init(
        fetchRequest: FetchRequest, completionBlock: (@Sendable (AsynchronousFetchResult<DepotObject>) -> Void)? = nil
    ) {
        self.init(fetchRequest: fetchRequest, as: DepotObject.self, completionBlock: completionBlock)
    }
}

extension DepotConnection {
    /// Starts `request` and returns once it is on its way, like
    /// `NSManagedObjectContext.execute(_:)`; the result's
    /// ``AsynchronousFetchResult/progress`` and ``AsynchronousFetchResult/progressUpdates``
    /// follow the daemon's reports, and ``AsynchronousFetchResult/value`` waits for the objects.
    ///
    /// - Throws: ``DepotClientError/closed`` when the connection is closed; the
    ///   fetch's own errors come from ``AsynchronousFetchResult/value``.
    @discardableResult
    public func execute<Object>(_ request: AsynchronousFetchRequest<Object>) async throws(DepotClientError)
        -> AsynchronousFetchResult<Object>
    {
        if isClosed { throw .closed }
        let running = AsynchronousFetchResult<Object>(connection: self, request: request)
        running.start()
        return running
    }

    /// Fetches `request`'s objects as `Object` (``DepotObject`` by default),
    /// streamed in chunks of its `batchSize`, so any number of them.
    /// `progress`, when given, follows the daemon's `$/progress` reports, and
    /// cancelling it (or the task) cancels the fetch with a cancellation error.
    public func fetch<Object: Decodable & Sendable>(
        _ request: FetchRequest, as type: Object.Type = DepotObject.self, progress: Progress? = nil
    ) async throws(DepotClientError) -> [Object] {
        let running = AsynchronousFetchResult<Object>(
            connection: self, request: AsynchronousFetchRequest(fetchRequest: request, as: Object.self),
            progress: progress)
        let result = await withTaskCancellationHandler {
            running.start()
            return await running.outcome()
        } onCancel: {
            running.cancel()
        }
        return try result.get()
    }
}
