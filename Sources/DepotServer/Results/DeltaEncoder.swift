import DepotProtocol
import DepotStore

/// Turns a set's delta into the bytes of `results/didChange`: the part every
/// subscriber of the set shares is encoded once, with the objects' values;
/// each subscriber's notification only adds its own `subscription` and `seq`.
///
/// Written directly, since it is on every commit's path (the generic encoder
/// costs several times as much).
enum DeltaEncoder {
    /// The most object changes one `results/didChange` carries; a transaction that
    /// changes more (a big batch) gets `results/didInvalidate {reason: "largeTransaction"}`.
    static let largestNotification = 10_000

    /// The shared part of `delta`'s notification, with the values of the
    /// objects it inserts, moves or updates (taken from `rows`, the changed rows'
    /// whole values, where the set's shape can be, else read from `store`); `nil` when it changes more than
    /// ``largestNotification`` objects.
    static func shared(
        _ delta: ResultSet.Delta, of set: ResultSet, transactions: [Int64]?, rows: [Int64: EvaluationRow]?,
        store: Store?, reads: inout ServerStats.StoreReads
    ) throws(RPCError) -> [UInt8]? {
        guard delta.objects.count <= largestNotification else { return nil }
        if set.grouped != nil {
            // A group's dictionary is in memory; its id names its groupBy values.
            let changes = delta.objects.map { change in
                ObjectChange(
                    type: change.type, indexPath: change.old, newIndexPath: change.new, id: set.wireID(of: change.id),
                    object: change.type == .delete ? nil : set.grouped?.dictionary(of: change.id))
            }
            return sharedDelta(transactions: transactions, sections: delta.sections, objects: changes)
        }
        let entity = set.plan.entity
        var objects: [Int64: JSONValue] = [:]
        var unread: [Int64] = []
        for change in delta.objects where change.type != .delete {
            if let row = rows?[change.id], let object = set.shape.project(row.object) {
                objects[change.id] = object
            } else {
                unread.append(change.id)
            }
        }
        if !unread.isEmpty {
            guard let store else { throw RPCError.internalError("no snapshot was taken for the commit") }
            reads.count(.include)
            objects.merge(try store.objects(rows: unread, shape: set.shape)) { read, _ in read }
        }
        let changes = delta.objects.map { change in
            ObjectChange(
                type: change.type, indexPath: change.old, newIndexPath: change.new,
                id: "\(entity.name)/\(change.id)", object: change.type == .delete ? nil : objects[change.id])
        }
        return sharedDelta(transactions: transactions, sections: delta.sections, objects: changes)
    }

    /// The part of a `results/didChange` every subscriber of a set shares, as a
    /// JSON object: written directly, since it is on every commit's path (the
    /// generic encoder costs several times as much).
    static func sharedDelta(transactions: [Int64]?, sections: [SectionChange], objects: [ObjectChange]) -> [UInt8] {
        var writer = JSONWriter()
        func write(_ numbers: [Int]) {
            writer.writeRaw("[")
            for (index, number) in numbers.enumerated() {
                if index > 0 { writer.writeRaw(",") }
                writer.write(Int64(number))
            }
            writer.writeRaw("]")
        }
        writer.writeRaw("{")
        if let transactions {
            writer.writeRaw("\"transactions\":")
            write(transactions.map { Int($0) })
            writer.writeRaw(",")
        }
        writer.writeRaw("\"sections\":[")
        for (index, section) in sections.enumerated() {
            writer.writeRaw(index > 0 ? ",{\"type\":" : "{\"type\":")
            writer.write(section.type.rawValue)
            writer.writeRaw(",\"index\":")
            writer.write(Int64(section.index))
            writer.writeRaw(",\"name\":")
            writer.write(section.name)
            writer.writeRaw("}")
        }
        writer.writeRaw("],\"objects\":[")
        for (index, change) in objects.enumerated() {
            writer.writeRaw(index > 0 ? ",{\"type\":" : "{\"type\":")
            writer.write(change.type.rawValue)
            if let path = change.indexPath {
                writer.writeRaw(",\"indexPath\":")
                write(path)
            }
            if let path = change.newIndexPath {
                writer.writeRaw(",\"newIndexPath\":")
                write(path)
            }
            writer.writeRaw(",\"id\":")
            writer.write(change.id)
            if let object = change.object {
                writer.writeRaw(",\"object\":")
                writer.write(object)
            }
            writer.writeRaw("}")
        }
        writer.writeRaw("]}")
        return writer.bytes
    }

    /// A whole `results/didChange` message: the subscriber's own members spliced before the shared ones.
    static func didChange(_ shared: [UInt8], subscription: SubscriptionTable.Subscription, transaction: Int64)
        -> [UInt8]
    {
        var writer = JSONWriter()
        writer.writeRaw("{\"subscription\":")
        writer.write(subscription.id)
        writer.writeRaw(",\"seq\":")
        writer.write(subscription.seq)
        writer.writeRaw(",\"transaction\":")
        writer.write(transaction)
        writer.writeRaw(",")
        writer.writeRaw(shared.dropFirst())
        return MessageEncoder.notification(method: ResultsDidChange.name, paramsJSON: writer.bytes)
    }
}
