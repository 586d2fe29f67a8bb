import DepotClient
import Foundation
import XCTest
import ZeroMQ

/// Shared helpers of the Client*Tests.
enum ClientSupport {
    /// Skips the test when the daemon does not have fetched results yet (-32601).
    static func requireFetchedResults(_ connection: DepotConnection) async throws {
        do {
            _ = try await connection.call(ResultsDeleteCache.self, .init(cacheName: "depot-client-probe"))
        } catch  where error.rpcError?.code == .methodNotFound {
            throw XCTSkip(
                "this depotd has no results/* methods yet (-32601); the fetched-results server is merged separately")
        }
    }

    /// A loopback TCP port that was free a moment ago (for a daemon that must come back on the same endpoint).
    static func freePort() throws -> Int {
        let context = try Context()
        let socket = try Socket(context: context, type: .router)
        try socket.bind("tcp://127.0.0.1:*")
        let endpoint = try socket.lastEndpoint()
        socket.close()
        context.terminate()
        return Int(endpoint.split(separator: ":").last!)!
    }

    /// The first element of `stream` that satisfies `predicate`, or `nil` after `timeout`.
    static func first<Element: Sendable>(
        _ stream: AsyncStream<Element>, timeout: Duration = .seconds(20),
        where predicate: @escaping @Sendable (Element) -> Bool = { _ in true }
    ) async -> Element? {
        await withTaskGroup(of: Element?.self) { group in
            group.addTask {
                for await element in stream where predicate(element) { return element }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let result = await group.next() ?? nil
            group.cancelAll()
            return result
        }
    }

    /// Waits until `condition` holds, checking after each element of `stream`; false after `timeout`.
    static func wait<Element: Sendable>(
        on stream: AsyncStream<Element>, timeout: Duration = .seconds(20),
        until condition: @escaping @Sendable () -> Bool
    ) async -> Bool {
        if condition() { return true }
        return await first(stream, timeout: timeout) { _ in condition() } != nil || condition()
    }

    /// `change` applied to `layout` and `values` (the results before it), as a fresh client would.
    static func apply(
        _ change: FetchedResultsChangeSet<DepotObject>, to layout: ResultsLayout, values: [String: DepotObject]
    ) throws -> (ResultsLayout, [String: DepotObject]) {
        var layout = layout
        layout.seq = change.seq - 1
        try layout.apply(
            ResultsDidChange.Parameters(
                subscription: "oracle", seq: change.seq, transaction: change.transaction ?? 0,
                sections: change.sectionChanges.map {
                    SectionChange(type: $0.type == .insert ? .insert : .delete, index: $0.index, name: $0.name)
                },
                objects: change.objectChanges.map { object in
                    let type: ObjectChange.Kind =
                        switch object.type {
                        case .insert: .insert
                        case .delete: .delete
                        case .move: .move
                        case .update: .update
                        }
                    return ObjectChange(
                        type: type, indexPath: object.indexPath.map(Array.init),
                        newIndexPath: object.newIndexPath.map(Array.init), id: object.id)
                }))
        var values = values
        for object in change.objectChanges where object.type != .delete {
            values[object.id] = try XCTUnwrap(object.object, "\(object.type) of \(object.id) carries its values")
        }
        return (layout, values)
    }
}
