import DepotProtocol
import DepotStore

/// Fans a committed transaction out to every `store/observe` registration as
/// `store/didSave` (Core Data's did-save notification, across processes).
struct ObservationCenter {
    /// Queues the notifications for `transaction`; runs on the writer queue
    /// right after the commit, so they precede the committing request's response.
    static func publish(_ transaction: CommittedTransaction, service: DepotService) {
        let observers = service.sessions.observers()
        guard !observers.isEmpty else { return }
        let changes = transaction.wireChanges
        var values: [String: JSONValue]?
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
                    <= ResultsEngine.largestNotification
            {
                if values == nil { values = readValues(changes, store: service.store) }
                objects = values?.filter { key, _ in
                    selected.keys.contains(String(key.split(separator: "/").first ?? ""))
                }
            }
            let params = DidSave.Parameters(
                observer: observer, transaction: transaction.number, author: transaction.author, changes: selected,
                objects: objects)
            service.notify(DidSave.self, params, to: routingID)
        }
    }

    private static func readValues(_ changes: [String: EntityChanges], store: Store) -> [String: JSONValue] {
        let ids = changes.values.flatMap { $0.inserted + $0.updated.map(\.id) }
        guard let objects = try? store.objects(ids: ids) else { return [:] }
        return Dictionary(zip(ids, objects).filter { !$0.1.isNull }, uniquingKeysWith: { first, _ in first })
    }
}
