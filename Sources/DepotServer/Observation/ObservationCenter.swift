import DepotProtocol
import DepotStore

/// Fans a committed transaction out to every `store/observe` registration as
/// `store/didSave` (Core Data's did-save notification, across processes).
struct ObservationCenter {
    /// Queues the notifications for `transaction`; runs in the publish lane,
    /// so they precede the committing request's response. Values are read
    /// from `store`, a snapshot right after the commit (left out without one).
    static func publish(_ transaction: CommittedTransaction, store: Store?, service: DepotService) {
        let observers = service.sessions.observers(concerning: transaction)
        guard !observers.isEmpty else { return }
        let changes = transaction.wireChanges
        var values: [ObjectID: JSONValue]?
        // Made for the first scoped observer: none, no extra work.
        var checks: ScopedObservation.Checks?
        for (routingID, observer, registration) in observers {
            let parameters = registration.parameters
            var selected = changes
            // The ids a scoped key may see, to pick their values by (nil: every id of `selected`).
            var seen: Set<String>?
            // The relationships to entities a scoped key cannot read: they do not exist for it.
            var withheld: WithheldKeys?
            if let scoped = registration.scoped {
                guard
                    let visible = scopedChanges(
                        transaction, scoped: scoped, store: store, checks: &checks, observer: observer,
                        routingID: routingID, service: service)
                else { continue }
                seen = Set(visible.values.flatMap { $0.inserted + $0.updated.map(\.id) })
                if let schema = store?.schema {
                    withheld = WithheldKeys(schema: schema, hides: scoped.scope.hides)
                }
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
                if values == nil, let store { values = readValues(transaction, store: store, service: service) }
                // Ids become text here, at the wire, once.
                objects = values.map { values in
                    Dictionary(
                        uniqueKeysWithValues: values.filter { selected.keys.contains($0.key.entity) }.compactMap {
                            let id = $0.key.description
                            guard seen.map({ $0.contains(id) }) ?? true else { return nil }
                            return (id, withheld?.filter($0.value, entity: $0.key.entity) ?? $0.value)
                        })
                }
            }
            let params = DidSave.Parameters(
                observer: observer, transaction: transaction.number, author: transaction.author, changes: selected,
                objects: objects)
            service.notify(DidSave.self, params, to: routingID)
        }
    }

    /// The changes of `transaction` that a scoped observer may see (`nil` when
    /// none: before its baseline, or nothing in its scope). When the scope
    /// cannot be evaluated the observer is removed, logged, and its client gets
    /// `store/observeDidEnd`: it must not hear of objects outside its scope, nor
    /// miss what left it unnoticed.
    private static func scopedChanges(
        _ transaction: CommittedTransaction, scoped: ScopedObservation, store: Store?,
        checks: inout ScopedObservation.Checks?, observer: String, routingID: [UInt8], service: DepotService
    ) -> [String: EntityChanges]? {
        do throws(RPCError) {
            guard let store else { throw .internalError("no snapshot of the store after the commit") }
            // Changed in place (a copy per observer would copy what every earlier one found).
            if checks == nil { checks = ScopedObservation.Checks(transaction, store: store) }
            return try scoped.changes(of: transaction, store: store, checks: &checks!)
        } catch {
            _ = service.sessions.removeObserver(observer, routingID: routingID)
            service.logger.error(
                "store/observe \(observer) of a scoped key is removed: its scope could not be evaluated for transaction \(transaction.number): \(error.message)"
            )
            // The client depends on hearing it: its observer says nothing more from here.
            service.notify(
                ObserveDidEnd.self,
                .init(observer: observer, reason: "error", message: error.message, transaction: transaction.number),
                to: routingID)
            return nil
        }
    }

    /// The values of the objects `transaction` inserted or updated, one read per entity.
    private static func readValues(
        _ transaction: CommittedTransaction, store: Store, service: DepotService
    ) -> [ObjectID: JSONValue] {
        var values: [ObjectID: JSONValue] = [:]
        for (name, changes) in transaction.changes {
            let rows = changes.inserted + changes.updated.map(\.row)
            guard !rows.isEmpty, let entity = store.schema.entity(named: name) else { continue }
            do {
                let shape = try ObjectShape(entity: entity, properties: nil)
                for (row, object) in try store.objects(rows: rows, shape: shape) {
                    values[ObjectID(entity: name, row: row)] = object
                }
            } catch {
                service.logger.error(
                    "store/didSave of transaction \(transaction.number) goes without the values of \(name): \(error.message)"
                )
            }
        }
        return values
    }
}

extension DepotService {
    /// Reads the baseline of a scoped observer in the publish lane, after
    /// every commit so far (with `scope`, or the one it was made with): until
    /// then it hears of nothing. A failure removes the observer, is logged, and
    /// sends its client `store/observeDidEnd`.
    func startObservation(
        _ scoped: ScopedObservation, scope: KeyScope? = nil, observer: String, routingID: [UInt8]
    ) {
        afterCommits { [self] snapshot in
            do throws(RPCError) {
                let terms = try scoped.start(scope: scope ?? scoped.scope, store: snapshot.get())
                sessions.file(observer, routingID: routingID, terms: terms)
            } catch {
                _ = sessions.removeObserver(observer, routingID: routingID)
                logger.error(
                    "store/observe \(observer) of a scoped key is removed: its scope could not be read: \(error.message)"
                )
                notify(
                    ObserveDidEnd.self, .init(observer: observer, reason: "error", message: error.message),
                    to: routingID)
            }
        }
    }
}
