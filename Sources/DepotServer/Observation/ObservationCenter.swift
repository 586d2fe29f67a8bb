import DepotProtocol
import DepotStore
import Logging

/// Sends one peer a notification, counted in the statistics: all that a
/// ``ProgressReporter`` needs of the daemon.
protocol Notifier: Sendable {
    /// Queues a notification for `routingID`, counted in the statistics.
    func notify<N: NotificationMethod>(_ method: N.Type, _ params: N.Parameters, to routingID: [UInt8])
}

/// What publishing to observers may ask of the daemon, and nothing more:
/// notify, log, count store reads, and the model now.
protocol ObservationContext: Notifier {
    /// Where publishing logs.
    var logger: Logger { get }
    /// The store's model now (what a commit without a snapshot is evaluated under).
    var currentSchema: Schema { get }
    /// Counts what publishing one commit read of the store.
    func storeReadsMade(_ reads: ServerStats.StoreReads)
}

/// Fans a committed transaction out to every `store/observe` registration as
/// `store/didSave` (Core Data's did-save notification, across processes).
struct ObservationCenter {
    /// Queues the notifications for `transaction` to `observers`; runs in the
    /// publish lane, so they precede the committing request's response.
    /// Values come from the commit's row images where it carries them, else
    /// from `store`, a snapshot right after the commit (left out without one).
    ///
    /// - Parameter countsCommit: whether the commit's reads (if any) count as a
    ///   commit of their own in the statistics (`false` when the results engine counted it).
    /// - Returns: the observers that ended (their scope could not be evaluated): remove them.
    static func publish(
        _ transaction: CommittedTransaction, to observers: [ObserverTable.Entry], store: Store?, countsCommit: Bool,
        context: some ObservationContext
    ) -> [ObserverTable.Entry] {
        guard !observers.isEmpty else { return [] }
        let schema = store?.schema ?? context.currentSchema
        let changes = transaction.wireChanges
        // The values of the changed objects, by entity, taken once for the first observer that wants them.
        var values: [String: [ObjectID: JSONValue]?] = [:]
        // Made for the first scoped observer: none, no extra work.
        var checks: ScopedObservation.Checks?
        var reads = ServerStats.StoreReads()
        var ended: [ObserverTable.Entry] = []
        defer {
            reads.changedRows += Int64(checks?.rows.reads ?? 0)
            reads.relationship += Int64(checks?.sqlReads ?? 0)
            if reads.changedRows + reads.relationship + reads.include > 0 {
                if countsCommit { (reads.commits, reads.snapshot) = (1, 1) }
                context.storeReadsMade(reads)
            }
        }
        for entry in observers {
            let parameters = entry.registration.parameters
            var selected = changes
            // The ids a scoped key may see, to pick their values by (nil: every id of `selected`).
            var seen: Set<String>?
            // The relationships to entities a scoped key cannot read: they do not exist for it.
            var withheld: WithheldKeys?
            if let scoped = entry.registration.scoped {
                guard
                    let visible = scopedChanges(
                        transaction, scoped: scoped, store: store, schema: schema, checks: &checks, entry: entry,
                        ended: &ended, context: context)
                else { continue }
                seen = Set(visible.values.flatMap { $0.inserted + $0.updated.map(\.id) })
                withheld = WithheldKeys(schema: schema, hides: scoped.scope.hides)
                selected = withheld?.filter(visible) ?? visible
            } else if let entities = parameters.entities {
                selected = changes.filter { entities.contains($0.key) }
            }
            if selected.isEmpty { continue }
            var objects: [String: JSONValue]?
            // Values of a very large transaction (a big batch) are left out: fetch them.
            if parameters.includeValues == true
                && transaction.changes.values.reduce(0, { $0 + $1.inserted.count + $1.updated.count })
                    <= DeltaEncoder.largestNotification
            {
                var found: [ObjectID: JSONValue]? = [:]
                for entity in selected.keys {
                    if values.index(forKey: entity) == nil {
                        values[entity] = self.values(
                            of: entity, in: transaction, store: store, schema: schema, reads: &reads, context: context)
                    }
                    // An entity whose values cannot be had (no snapshot): the objects are left out.
                    guard let entityValues = values[entity]!, found != nil else {
                        found = nil
                        break
                    }
                    found!.merge(entityValues) { first, _ in first }
                }
                // Ids become text here, at the wire, once.
                objects = found.map { values in
                    Dictionary(
                        uniqueKeysWithValues: values.compactMap {
                            let id = $0.key.description
                            guard seen.map({ $0.contains(id) }) ?? true else { return nil }
                            return (id, withheld?.filter($0.value, entity: $0.key.entity) ?? $0.value)
                        })
                }
            }
            let params = DidSave.Parameters(
                observer: entry.observer, transaction: transaction.number, author: transaction.author,
                changes: selected, objects: objects)
            context.notify(DidSave.self, params, to: entry.routingID)
        }
        return ended
    }

    /// The changes of `transaction` that a scoped observer may see (`nil` when
    /// none: before its baseline, or nothing in its scope). When the scope
    /// cannot be evaluated the observer joins `ended` (the caller removes it), it is logged, and its client gets
    /// `store/observeDidEnd`: it must not hear of objects outside its scope, nor
    /// miss what left it unnoticed.
    private static func scopedChanges(
        _ transaction: CommittedTransaction, scoped: ScopedObservation, store: Store?, schema: Schema,
        checks: inout ScopedObservation.Checks?, entry: ObserverTable.Entry, ended: inout [ObserverTable.Entry],
        context: some ObservationContext
    ) -> [String: EntityChanges]? {
        do throws(RPCError) {
            // Changed in place (a copy per observer would copy what every earlier one found).
            if checks == nil { checks = ScopedObservation.Checks(transaction, store: store, schema: schema) }
            return try scoped.changes(of: transaction, store: store, checks: &checks!)
        } catch {
            ended.append(entry)
            context.logger.error(
                "store/observe \(entry.observer) of a scoped key is removed: its scope could not be evaluated for transaction \(transaction.number): \(error.message)"
            )
            // The client depends on hearing it: its observer says nothing more from here.
            context.notify(
                ObserveDidEnd.self,
                .init(
                    observer: entry.observer, reason: "error", message: error.message, transaction: transaction.number),
                to: entry.routingID)
            return nil
        }
    }

    /// The values of the objects of `entity` that `transaction` inserted or updated: from its row
    /// images when it carries them, else one read of `store` (counted in `reads`); `nil` when
    /// neither has them (no snapshot was taken).
    private static func values(
        of entity: String, in transaction: CommittedTransaction, store: Store?, schema: Schema,
        reads: inout ServerStats.StoreReads, context: some ObservationContext
    ) -> [ObjectID: JSONValue]? {
        guard let changes = transaction.changes[entity] else { return [:] }
        let rows = changes.inserted + changes.updated.map(\.row)
        guard !rows.isEmpty else { return [:] }
        var values: [ObjectID: JSONValue] = [:]
        if let images = transaction.images[entity] {
            for row in rows {
                if let image = images[row] { values[ObjectID(entity: entity, row: row)] = .object(image.object) }
            }
            return values
        }
        guard let store else { return nil }
        guard let described = schema.entity(named: entity) else { return [:] }
        do throws(RPCError) {
            reads.include += 1
            let shape = try ObjectShape(entity: described, properties: nil)
            for (row, object) in try store.objects(rows: rows, shape: shape) {
                values[ObjectID(entity: entity, row: row)] = object
            }
        } catch {
            context.logger.error(
                "store/didSave of transaction \(transaction.number) goes without the values of \(entity): \(error.message)"
            )
        }
        return values
    }
}
