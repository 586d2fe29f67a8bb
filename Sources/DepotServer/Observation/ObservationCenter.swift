import DepotProtocol
import DepotStore

/// Fans a committed transaction out to every `store/observe` registration as
/// `store/didSave` (Core Data's did-save notification, across processes).
struct ObservationCenter {
    /// Queues the notifications for `transaction`; runs in the publish lane,
    /// so they precede the committing request's response. Values are read
    /// from `store`, a snapshot right after the commit (left out without one).
    static func publish(_ transaction: CommittedTransaction, store: Store?, service: DepotService) {
        let observers = service.sessions.observers()
        guard !observers.isEmpty else { return }
        let changes = transaction.wireChanges
        var values: [ObjectID: JSONValue]?
        for (routingID, observer, parameters) in observers {
            var selected = changes
            if let entities = parameters.entities {
                selected = changes.filter { entities.contains($0.key) }
                if selected.isEmpty { continue }
            }
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
                        uniqueKeysWithValues: values.filter { selected.keys.contains($0.key.entity) }.map {
                            ($0.key.description, $0.value)
                        })
                }
            }
            let params = DidSave.Parameters(
                observer: observer, transaction: transaction.number, author: transaction.author, changes: selected,
                objects: objects)
            service.notify(DidSave.self, params, to: routingID)
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
