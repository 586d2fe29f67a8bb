import DepotProtocol
import DepotStore
import Foundation
import PostgresNIO

/// Entries as the log stores them: the `changes` column of `depot_log` (the changeset has its own).
extension PostgresReplication {
    /// The `changes` column: what the entry did, without the changeset (its own column).
    static func encode(_ entry: ReplicatedEntry) -> JSONValue {
        var object: [String: JSONValue] = [
            "author": entry.author.map(JSONValue.string) ?? .null, "timestamp": .double(entry.timestamp),
        ]
        switch entry.content {
        case .data(let transaction, let changes, _, let continued):
            object["kind"] = "data"
            object["transaction"] = .int(transaction)
            object["history"] = .string(changes)
            if continued { object["continued"] = true }
        case .model(let entities, let removing, let transaction):
            object["kind"] = "model"
            object["entities"] = (try? JSONCoding.encode(entities)) ?? .array([])
            object["remove"] = .array(removing.map(JSONValue.string))
            if let transaction { object["transaction"] = .int(transaction) }
        }
        return .object(object)
    }

    /// The entry numbered `number` from its `changes` column `json` and its `changeset` column.
    static func decode(number: Int64, json: String, changeset: Data?) throws(ChangeLogError) -> ReplicatedEntry {
        func malformed(_ reason: String) -> ChangeLogError { .malformedEntry(transaction: number, reason: reason) }
        let value: JSONValue
        do { value = try JSONParser.parse(json) } catch { throw malformed("\(error)") }
        guard case .object(let object) = value, case .string(let kind)? = object["kind"] else {
            throw malformed("no kind: not written by a depotd replica")
        }
        let timestamp: Double
        switch object["timestamp"] {
        case .double(let value)?: timestamp = value
        case .int(let value)?: timestamp = Double(value)
        default: throw malformed("no timestamp")
        }
        let author: String? = if case .string(let author)? = object["author"] { author } else { nil }
        switch kind {
        case "data":
            guard case .string(let history)? = object["history"], case .int(let transaction)? = object["transaction"]
            else { throw malformed("no history or transaction") }
            return ReplicatedEntry(
                number: number, author: author, timestamp: timestamp,
                content: .data(
                    transaction: transaction, changes: history, changeset: changeset.map { Array($0) } ?? [],
                    continued: object["continued"] == true))
        case "model":
            guard let entities = object["entities"],
                let decoded = try? JSONCoding.decode([EntityDescription].self, from: entities)
            else { throw malformed("no entities") }
            let removing: [String] =
                if case .array(let names)? = object["remove"] {
                    names.compactMap { if case .string(let name) = $0 { name } else { nil } }
                } else { [] }
            let transaction: Int64? =
                if case .int(let transaction)? = object["transaction"] { transaction } else { nil }
            return ReplicatedEntry(
                number: number, author: author, timestamp: timestamp,
                content: .model(entities: decoded, removing: removing, transaction: transaction))
        default:
            throw malformed("unknown kind '\(kind)'")
        }
    }

    /// The entries of rows of `("transaction", changes, changeset, checksum)`.
    static func entries(in rows: [PostgresRow]) throws(RPCError) -> [ReplicatedEntry] {
        do {
            return try rows.map { row in
                let (number, json, changeset, checksum) = try row.decode((Int64, String, Data?, Int64?).self)
                var entry = try decode(number: number, json: json, changeset: changeset)
                entry.checksum = checksum
                return entry
            }
        } catch {
            throw .internalError("the cluster's log cannot be read: \(ChangeLogError.wrapping(error))")
        }
    }
}
