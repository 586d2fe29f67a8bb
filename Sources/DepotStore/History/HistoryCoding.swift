import DepotProtocol

/// The compact text a history row stores for a transaction's changes.
///
/// Row numbers instead of `"Entity/row"` strings, consecutive rows as one
/// range, and updates grouped by the set of keys they changed:
///
/// ```json
/// {"Item": {"i": [[1, 2000]], "u": [{"k": ["name"], "r": [7, [9, 12]]}], "d": [5]}}
/// ```
///
/// An entity whose keys row-level scopes read also carries their values before
/// and after (`"s"`, ``RecordedValues``).
///
/// A run is `[first, last]` (or `[first, last, step]`), a lone row a plain number. A 2,000-row batch
/// insert is a dozen bytes instead of ~30 KB. Rows written by earlier versions
/// in the wire form (`{"inserted": ["Item/1"], …}`) are still read.
enum HistoryCoding {
    /// The stored text of `changes`.
    static func encode(_ changes: [String: EntityChangeSet]) -> [UInt8] {
        var writer = JSONWriter()
        writer.writeRaw("{")
        for (index, entity) in changes.keys.sorted().enumerated() {
            let set = changes[entity]!
            if index > 0 { writer.writeRaw(",") }
            writer.write(entity)
            writer.writeRaw(":{")
            var members = 0
            func member(_ name: String) {
                if members > 0 { writer.writeRaw(",") }
                members += 1
                writer.write(name)
                writer.writeRaw(":")
            }
            if !set.inserted.isEmpty {
                member("i")
                writeRuns(set.inserted, into: &writer)
            }
            if !set.updated.isEmpty {
                member("u")
                writer.writeRaw("[")
                // Grouped by key set, in order of each group's first row.
                var groups: [[String]: [Int64]] = [:]
                var order: [[String]] = []
                for (row, keys) in set.updated {
                    let sorted = keys.sorted()
                    if groups[sorted] == nil { order.append(sorted) }
                    groups[sorted, default: []].append(row)
                }
                for (groupIndex, keys) in order.enumerated() {
                    if groupIndex > 0 { writer.writeRaw(",") }
                    writer.writeRaw("{\"k\":")
                    writer.write(.array(keys.map { .string($0) }))
                    writer.writeRaw(",\"r\":")
                    writeRuns(groups[keys]!, into: &writer)
                    writer.writeRaw("}")
                }
                writer.writeRaw("]")
            }
            if !set.deleted.isEmpty {
                member("d")
                writeRuns(set.deleted, into: &writer)
            }
            if let recorded = set.recorded {
                member("s")
                writeRecorded(recorded, into: &writer)
            }
            writer.writeRaw("}")
        }
        writer.writeRaw("}")
        return writer.bytes
    }

    /// Rows as runs in the order given: `[first, last]` for consecutive rows,
    /// `[first, last, step]` for three or more evenly spaced ones (every other
    /// row of a batch update), a plain number for a row on its own.
    private static func writeRuns(_ rows: [Int64], into writer: inout JSONWriter) {
        writer.writeRaw("[")
        var index = 0
        while index < rows.count {
            if index > 0 { writer.writeRaw(",") }
            let step = index + 1 < rows.count ? rows[index + 1] &- rows[index] : 0
            var end = index
            if step > 0 {
                while end + 1 < rows.count, rows[end + 1] &- rows[end] == step { end += 1 }
            }
            if end == index || (step > 1 && end - index < 2) {
                writer.write(rows[index])
                index += 1
                continue
            }
            writer.writeRaw("[")
            writer.write(rows[index])
            writer.writeRaw(",")
            writer.write(rows[end])
            if step > 1 {
                writer.writeRaw(",")
                writer.write(step)
            }
            writer.writeRaw("]")
            index = end + 1
        }
        writer.writeRaw("]")
    }

    /// The values row-level scopes read: `{"k": [keys], "v": [[row, before, after], …]}`,
    /// each of before and after an array of the keys' values, or `null` (inserted, deleted).
    private static func writeRecorded(_ recorded: RecordedValues, into writer: inout JSONWriter) {
        writer.writeRaw("{\"k\":")
        writer.write(.array(recorded.keys.map { .string($0) }))
        writer.writeRaw(",\"v\":[")
        for (index, row) in recorded.rows.keys.sorted().enumerated() {
            let change = recorded.rows[row]!
            if index > 0 { writer.writeRaw(",") }
            writer.writeRaw("[")
            writer.write(row)
            writer.writeRaw(",")
            writer.write(change.before.map { .array($0) } ?? .null)
            writer.writeRaw(",")
            writer.write(change.after.map { .array($0) } ?? .null)
            writer.writeRaw("]")
        }
        writer.writeRaw("]}")
    }

    private static func recorded(_ value: JSONValue) throws -> RecordedValues {
        guard let keys = value["k"]?.arrayValue?.compactMap(\.stringValue), let entries = value["v"]?.arrayValue
        else { throw Corrupt(description: "recorded scope values \(value.excerpt())") }
        var rows: [Int64: RecordedValues.Change] = [:]
        for entry in entries {
            guard let parts = entry.arrayValue, parts.count == 3, let row = parts[0].intValue else {
                throw Corrupt(description: "recorded scope values \(entry.excerpt())")
            }
            rows[row] = RecordedValues.Change(before: parts[1].arrayValue, after: parts[2].arrayValue)
        }
        return RecordedValues(keys: keys, rows: rows)
    }

    /// Why a stored row cannot be read.
    struct Corrupt: Error, CustomStringConvertible {
        let description: String
    }

    /// The changes of a stored row, in either the compact or the old wire form.
    static func decode(_ text: String) throws -> [String: EntityChangeSet] {
        guard case .object(let entities) = try JSONParser.parse(text) else {
            throw Corrupt(description: "history changes are not an object")
        }
        var result: [String: EntityChangeSet] = [:]
        for (entity, value) in entities {
            guard case .object(let members) = value else { throw Corrupt(description: "changes of \(entity)") }
            var set = EntityChangeSet(entity: entity)
            if members["inserted"] != nil || members["updated"] != nil || members["deleted"] != nil {
                let wire = try JSONCoding.decode(EntityChanges.self, from: value)
                set.inserted = wire.inserted.compactMap { ObjectID($0)?.row }
                set.updated = wire.updated.compactMap { update in
                    ObjectID(update.id).map { ($0.row, Set(update.keys)) }
                }
                set.deleted = wire.deleted.compactMap { ObjectID($0)?.row }
            } else {
                set.inserted = try rows(members["i"])
                set.deleted = try rows(members["d"])
                for group in members["u"]?.arrayValue ?? [] {
                    let keys = Set((group["k"]?.arrayValue ?? []).compactMap(\.stringValue))
                    for row in try rows(group["r"]) { set.updated.append((row, keys)) }
                }
                if let values = members["s"] { set.recorded = try recorded(values) }
            }
            result[entity] = set
        }
        return result
    }

    private static func rows(_ runs: JSONValue?) throws -> [Int64] {
        var rows: [Int64] = []
        for run in runs?.arrayValue ?? [] {
            if let row = run.intValue {
                rows.append(row)
            } else if let run = run.arrayValue, run.count == 2 || run.count == 3, let first = run[0].intValue,
                let last = run[1].intValue, first <= last
            {
                let step: Int64 = run.count == 3 ? run[2].intValue ?? 0 : 1
                guard step > 0 else { throw Corrupt(description: "a history run with step \(step)") }
                rows.append(contentsOf: stride(from: first, through: last, by: Int(step)))
            } else {
                throw Corrupt(description: "a history run \(run.excerpt())")
            }
        }
        return rows
    }
}
