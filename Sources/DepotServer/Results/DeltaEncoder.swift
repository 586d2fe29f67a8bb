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
        store: Store?, encoded: inout EncodedObjects, reads: inout ServerStats.StoreReads
    ) throws(RPCError) -> [UInt8]? {
        guard delta.objects.count <= largestNotification else { return nil }
        if set.grouped != nil {
            // A group's dictionary is in memory; its id names its groupBy values.
            let changes = delta.objects.map { change in
                EncodedChange(
                    type: change.type, indexPath: change.old, newIndexPath: change.new, id: set.wireID(of: change.id),
                    object: change.type == .delete ? nil : set.grouped.map { Self.bytes($0.dictionary(of: change.id)) })
            }
            return sharedDelta(transactions: transactions, sections: delta.sections, objects: changes)
        }
        let entity = set.plan.entity
        let objects = try encoded.objects(
            delta.objects.filter { $0.type != .delete }.map(\.id), shape: set.shape, rows: rows, store: store,
            reads: &reads)
        let changes = delta.objects.map { change in
            EncodedChange(
                type: change.type, indexPath: change.old, newIndexPath: change.new,
                id: "\(entity.name)/\(change.id)", object: change.type == .delete ? nil : objects[change.id])
        }
        return sharedDelta(transactions: transactions, sections: delta.sections, objects: changes)
    }

    /// One object change as a notification writes it: the object's JSON already encoded.
    struct EncodedChange {
        var type: ObjectChange.Kind
        var indexPath: [Int]?
        var newIndexPath: [Int]?
        var id: String
        var object: [UInt8]?
    }

    /// `value`'s JSON text.
    static func bytes(_ value: JSONValue) -> [UInt8] {
        var writer = JSONWriter()
        writer.write(value)
        return writer.bytes
    }

    /// The part of a `results/didChange` every subscriber of a set shares, as a
    /// JSON object: written directly, since it is on every commit's path (the
    /// generic encoder costs several times as much).
    static func sharedDelta(transactions: [Int64]?, sections: [SectionChange], objects: [EncodedChange]) -> [UInt8] {
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
                writer.writeRaw(object)
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

/// The objects one lane job's notifications carry, encoded once per shape and row: sets that show
/// the same rows in the same shape (distinct requests over one table, each with its own set) share
/// one read and one encoding of each object instead of one per set.
///
/// Lives for one lane job (``ResultsEngine/Outgoing``), within which every set reads one state.
struct EncodedObjects {
    /// What makes two sets' objects the same JSON: the entity, the keys read, and `version`.
    private struct ShapeKey: Hashable {
        var entity: ByteString
        var keys: [ByteString]
        var toManyKeys: [ByteString]
        var includesVersion: Bool

        init(_ shape: ObjectShape) {
            entity = ByteString(shape.entity.name)
            keys = shape.keys.map { ByteString($0) }
            toManyKeys = shape.toManyKeys.map { ByteString($0) }
            includesVersion = shape.includesVersion
        }
    }

    private var byShape: [ShapeKey: [Int64: [UInt8]]] = [:]

    /// The JSON of the objects `ids` in `shape`: encoded for an earlier set, else taken from `rows`
    /// (the changed rows' whole values) where the shape can project them, else read from `store`.
    /// An id the store no longer has is left out.
    mutating func objects(
        _ ids: [Int64], shape: ObjectShape, rows: [Int64: EvaluationRow]?, store: Store?,
        reads: inout ServerStats.StoreReads
    ) throws(RPCError) -> [Int64: [UInt8]] {
        let key = ShapeKey(shape)
        var known = byShape[key] ?? [:]
        var unread: [Int64] = []
        for id in ids where known[id] == nil {
            if let row = rows?[id], let object = shape.project(row.object) {
                known[id] = DeltaEncoder.bytes(object)
            } else {
                unread.append(id)
            }
        }
        if !unread.isEmpty {
            guard let store else { throw RPCError.internalError("no snapshot was taken for the commit") }
            reads.count(.include)
            for (id, object) in try store.objects(rows: unread, shape: shape) {
                known[id] = DeltaEncoder.bytes(object)
            }
        }
        byShape[key] = known
        var found: [Int64: [UInt8]] = [:]
        found.reserveCapacity(ids.count)
        for id in ids { found[id] = known[id] }
        return found
    }
}
