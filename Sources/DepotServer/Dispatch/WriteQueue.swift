import DepotProtocol
import DepotStore
import Dispatch
import Synchronization

/// The single writer, in arrival order, with group commit.
///
/// Every write request takes its place in one list; the writer queue takes
/// from its head. A run of saves at the head (requests whose handler is
/// ``Handler/groupable``) is taken whole, up to ``largestGroup``, and run in
/// one SQLite transaction, each save in a savepoint of its own
/// (``WriteGroup``): one commit pays for all of them, a save that fails rolls
/// back only itself. Each save stays its own logical transaction (number,
/// history entry, notifications). After the group commits, every save's
/// notifications are queued in transaction order, then every response: the
/// contract's order (a transaction's notifications before its response, T
/// before T+1) holds as for single writes. Anything else (batches, model
/// changes) runs alone, in its place.
final class WriteQueue: Sendable {
    /// One write waiting for the writer.
    struct Entry: Sendable {
        /// Whether it may commit together with its neighbours.
        let groupable: Bool
        /// Runs it alone (and sends its response).
        let runAlone: @Sendable () -> Void
        /// Runs it inside a group; returns its response, to be sent once the group committed.
        let runInGroup: @Sendable (WriteGroupSlot) -> (bytes: [UInt8], sent: Bool)
        /// Sends a response for it.
        let send: @Sendable ([UInt8]) -> Void
        /// Its error response when the group's commit fails.
        let failure: @Sendable (RPCError) -> [UInt8]
    }

    /// A write that always runs alone (`run` sends its own response).
    static func alone(_ run: @escaping @Sendable () -> Void) -> Entry {
        Entry(
            groupable: false, runAlone: run, runInGroup: { _ in ([], true) }, send: { _ in },
            failure: { _ in [] })
    }

    /// The most saves one transaction commits.
    static let largestGroup = 64

    /// The serial queue everything that writes runs on (the results engine waits on it too).
    let queue = DispatchQueue(label: "depot.writer")
    private let pending = Mutex<[Entry]>([])

    /// How many writes wait (for stats and back-pressure).
    var depth: Int { pending.withLock { $0.count } }

    /// Queues `entry` behind every write that arrived before it.
    func enqueue(_ entry: Entry, store: Store, publish: @escaping @Sendable (CommittedTransaction) -> Void) {
        pending.withLock { $0.append(entry) }
        queue.async { [self] in drain(store: store, publish: publish) }
    }

    /// Runs the head of the list: one write, or a group of saves.
    private func drain(store: Store, publish: @Sendable (CommittedTransaction) -> Void) {
        let taken = pending.withLock { list -> [Entry] in
            guard let first = list.first else { return [] }
            guard first.groupable else { return [list.removeFirst()] }
            var group: [Entry] = []
            while let next = list.first, next.groupable, group.count < Self.largestGroup {
                group.append(list.removeFirst())
            }
            return group
        }
        guard let first = taken.first else { return }
        guard taken.count > 1 else { return first.runAlone() }
        let slot = WriteGroupSlot()
        var responses: [(bytes: [UInt8], sent: Bool)] = []
        do {
            try store.writeGroup { group in
                slot.group = group
                responses = taken.map { $0.runInGroup(slot) }
                slot.group = nil
            }
        } catch {
            // Nothing committed: every save of the group fails alike, and nothing is published.
            for entry in taken { entry.send(entry.failure(error)) }
            return
        }
        for transaction in slot.transactions { publish(transaction) }
        for (entry, response) in zip(taken, responses) where !response.sent { entry.send(response.bytes) }
    }
}

/// What the requests of one group share while it runs: the transaction to join,
/// and the transactions to publish once it committed.
final class WriteGroupSlot: @unchecked Sendable {
    // @unchecked: touched only on the writer queue, while the group runs.
    /// The group's transaction (set only while it runs).
    var group: WriteGroup?
    /// What the group's saves committed, in order.
    private(set) var transactions: [CommittedTransaction] = []

    /// Defers publishing `transaction` until the group commits.
    func publishAfterCommit(_ transaction: CommittedTransaction) { transactions.append(transaction) }
}
