import CZeroMQ
import Foundation

/// The load the subscription and scope cost benchmarks put on a daemon: many
/// sessions on one ZeroMQ context, and the median latency of a writer's saves.
enum SessionLoad {
    /// Opens `count` sessions on one ZeroMQ context, each `connect`ed and
    /// initialized as `name(index)`, then set up by `prepare` (its subscriptions,
    /// observers). The caller keeps the clients alive for as long as the load lasts.
    static func open(
        _ count: Int, connect: (_ index: Int, _ context: UnsafeMutableRawPointer?) throws -> RawRPCClient,
        name: (Int) -> String, context: UnsafeMutableRawPointer?,
        prepare: (_ client: RawRPCClient, _ index: Int) throws -> Void
    ) throws -> [RawRPCClient] {
        var clients: [RawRPCClient] = []
        for index in 0..<count {
            let client = try connect(index, context)
            try client.initialize(name: name(index))
            try prepare(client, index)
            clients.append(client)
        }
        return clients
    }

    /// The median latency in microseconds of `count` `store/save` calls by
    /// `writer`, the `index`th with the params `params(index)`.
    static func saveP50(_ count: Int, writer: RawRPCClient, params: (Int) -> String) throws -> Double {
        percentile(try saveLatencies(count, writer: writer, params: params), 0.5) * 1000
    }

    /// The latency in milliseconds of each of `count` `store/save` calls by `writer`, the
    /// `index`th with the params `params(index)`.
    static func saveLatencies(_ count: Int, writer: RawRPCClient, params: (Int) -> String) throws -> [Double] {
        var latencies: [Double] = []
        for index in 0..<count {
            let start = ContinuousClock.now
            _ = try writer.call("store/save", params: params(index))
            latencies.append((ContinuousClock.now - start).milliseconds)
        }
        return latencies
    }
}
