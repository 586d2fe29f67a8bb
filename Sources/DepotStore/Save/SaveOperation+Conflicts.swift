import DepotProtocol
import GRDB

// MARK: - Optimistic locking and merge policies

extension SaveOperation {
    /// The stored row of `id`.
    func storedRow(_ db: Database, _ id: ObjectID, entity: EntitySchema) throws -> Row? {
        try Row.fetchOne(statement(db, entity, .storedRow), arguments: [id.row])
    }

    /// The stored value of `key` as it would appear on the wire.
    func wireValue(_ row: Row, key: String, entity: EntitySchema) -> JSONValue {
        let value: DatabaseValue = row[key] ?? .null
        if let attribute = entity.attributes[key] { return ValueCoding.json(value, type: attribute.type) }
        if let relationship = entity.toOne[key] {
            return Int64.fromDatabaseValue(value).map { .string("\(relationship.destination)/\($0)") } ?? .null
        }
        return .null
    }

    /// Whether a stored value differs from a client's `original`, comparing stored forms.
    func differs(_ row: Row, key: String, original: JSONValue, entity: EntitySchema) -> Bool {
        let stored: DatabaseValue = row[key] ?? .null
        if let attribute = entity.attributes[key] {
            guard let expected = try? ValueCoding.databaseValue(original, type: attribute.type) else { return true }
            return !expected.isSame(as: stored)
        }
        if entity.toOne[key] != nil {
            let expected: DatabaseValue =
                original.stringValue.flatMap(ObjectID.init).flatMap { DatabaseValue(value: $0.row) } ?? .null
            return !expected.isSame(as: stored)
        }
        return false
    }

    /// Finds updates and deletes based on stale data and applies the merge policy.
    mutating func resolveConflicts(_ db: Database) throws {
        var conflicts: [JSONValue] = []
        var kept: [Update] = []
        for var update in updates {
            guard update.version != nil || update.original != nil,
                let row = try storedRow(db, update.id, entity: update.entity)
            else {
                kept.append(update)
                continue
            }
            let storeVersion: Int64 = row["_version"]
            var conflicting: Set<String> = []
            if let original = update.original {
                for (key, value) in original where differs(row, key: key, original: value, entity: update.entity) {
                    conflicting.insert(key)
                }
            }
            if let version = update.version, version < storeVersion, update.original == nil {
                conflicting = update.keys.isEmpty ? ["version"] : update.keys
            }
            guard !conflicting.isEmpty else {
                kept.append(update)
                continue
            }
            switch policy {
            case .error:
                let keys = conflicting.sorted()
                conflicts.append([
                    "id": .string(update.id.description), "keys": .array(keys.map { .string($0) }),
                    "storeVersion": .int(storeVersion),
                    "storeValues": .object(
                        Dictionary(
                            uniqueKeysWithValues: keys.filter { $0 != "version" }.map {
                                ($0, wireValue(row, key: $0, entity: update.entity))
                            })),
                ])
            case .objectTrump, .overwrite:
                kept.append(update)
            case .storeTrump:
                for key in conflicting {
                    update.values[key] = nil
                    update.toOne[key] = nil
                    update.toMany[key] = nil
                }
                kept.append(update)
            case .rollback:
                break
            }
        }
        var keptDeletes: [Delete] = []
        for delete in deletes {
            guard let version = delete.version, let row = try storedRow(db, delete.id, entity: delete.entity) else {
                keptDeletes.append(delete)
                continue
            }
            let storeVersion: Int64 = row["_version"]
            guard version < storeVersion else {
                keptDeletes.append(delete)
                continue
            }
            switch policy {
            case .error:
                conflicts.append([
                    "id": .string(delete.id.description), "keys": [], "storeVersion": .int(storeVersion),
                    "storeValues": [:],
                ])
            case .objectTrump, .overwrite:
                keptDeletes.append(delete)
            case .storeTrump, .rollback:
                break
            }
        }
        if !conflicts.isEmpty {
            let first = conflicts[0]["id"]?.stringValue ?? "?"
            throw RPCError(
                code: .mergeConflict,
                message:
                    "merge conflict: \(first) changed in the store since it was read (\(conflicts.count) conflicting object\(conflicts.count == 1 ? "" : "s"))",
                data: ["conflicts": .array(conflicts)])
        }
        updates = kept
        deletes = keptDeletes
    }
}

// MARK: - Uniqueness constraints

extension SaveOperation {
    /// Checks every insert and update against the uniqueness constraints; under
    /// `objectTrump`/`overwrite` an insert that collides becomes an update of the
    /// existing object, under `storeTrump`/`rollback` it resolves to the existing
    /// object unchanged, under `error` the save fails with -32011.
    mutating func resolveUniqueness(_ db: Database) throws {
        let deleted = Set(deletes.map(\.id))
        var violations: [JSONValue] = []
        // The first insert claiming each entity's constraint's values (typed values, no text built).
        var claimed: [ClaimedValues: Int] = [:]
        for position in inserts.indices {
            let entity = inserts[position].entity
            for (constraintIndex, constraint) in entity.description.uniquenessConstraints.enumerated() {
                let values = constraint.map { key -> DatabaseValue in
                    if let value = inserts[position].values[key] { return value }
                    if case .existing(let id)?? = inserts[position].toOne[key] { return id.row.databaseValue }
                    return .null
                }
                if values.contains(.null) { continue }
                let signature = ClaimedValues(
                    entity: entity.name, constraint: constraintIndex, values: values.map(StoredValue.init))
                if let earlier = claimed[signature] {
                    if policy == .error {
                        violations.append(
                            violation(
                                entity, constraint,
                                objects: [insertName(inserts[earlier]), insertName(inserts[position])]))
                    } else {
                        // Two inserts of the same unique object fold into the first.
                        if policy == .objectTrump || policy == .overwrite {
                            inserts[earlier].values.merge(inserts[position].values) { _, new in new }
                            inserts[earlier].toOne.merge(inserts[position].toOne) { _, new in new }
                        }
                        inserts[position].isUpsert = true
                        inserts[position].upsertKeepsStore = true
                        inserts[position].row = -Int64(earlier) - 1
                    }
                    continue
                }
                claimed[signature] = position
                let matches = try Int64.fetchAll(
                    statement(db, entity, .matching(constraint: constraintIndex, excludingRow: false)),
                    arguments: StatementArguments(databaseValues: values))
                guard let existing = matches.first(where: { !deleted.contains(ObjectID(entity: entity.name, row: $0)) })
                else { continue }
                switch policy {
                case .error:
                    violations.append(
                        violation(
                            entity, constraint, objects: [insertName(inserts[position]), "\(entity.name)/\(existing)"]))
                case .objectTrump, .overwrite:
                    inserts[position].isUpsert = true
                    inserts[position].row = existing
                case .storeTrump, .rollback:
                    inserts[position].isUpsert = true
                    inserts[position].upsertKeepsStore = true
                    inserts[position].row = existing
                }
            }
        }
        for update in updates {
            for (constraintIndex, constraint) in update.entity.description.uniquenessConstraints.enumerated()
            where !Set(constraint).isDisjoint(with: update.keys) {
                guard let row = try storedRow(db, update.id, entity: update.entity) else { continue }
                let values = constraint.map { key -> DatabaseValue in
                    if let value = update.values[key] { return value }
                    if let reference = update.toOne[key] {
                        if case .existing(let id)? = reference { return id.row.databaseValue }
                        return .null
                    }
                    return row[key] ?? .null
                }
                if values.contains(.null) { continue }
                let matches = try Int64.fetchAll(
                    statement(db, update.entity, .matching(constraint: constraintIndex, excludingRow: true)),
                    arguments: StatementArguments(databaseValues: values + [update.id.row.databaseValue]))
                if let other = matches.first(where: { !deleted.contains(ObjectID(entity: update.entity.name, row: $0)) }
                ) {
                    violations.append(
                        violation(
                            update.entity, constraint,
                            objects: [update.id.description, "\(update.entity.name)/\(other)"]))
                }
            }
        }
        if !violations.isEmpty {
            let first = violations[0]
            throw RPCError(
                code: .uniqueConstraint,
                message:
                    "uniqueness constraint \(first["entity"]?.stringValue ?? "")(\(Self.prose(first["constraint"]))) violated by \(Self.prose(first["objects"]))",
                data: [
                    "violations": .array(violations), "entity": first["entity"] ?? .null,
                    "constraint": first["constraint"] ?? .null, "objects": first["objects"] ?? .null,
                ])
        }
    }

    /// An insert's values for one uniqueness constraint of its entity (by the constraint's index).
    struct ClaimedValues: Hashable {
        let entity: String
        let constraint: Int
        /// Compared by bytes: two spellings of one text are two values, as in SQLite's unique index.
        let values: [StoredValue]
    }

    /// `["a", "b"]` as `a, b` (a message reads as prose, not as Swift's array debugging).
    static func prose(_ list: JSONValue?) -> String {
        (list?.arrayValue ?? []).map { $0.stringValue ?? $0.excerpt() }.joined(separator: ", ")
    }

    private func insertName(_ insert: Insert) -> String { insert.tempId ?? "inserted[\(insert.index)]" }

    private func violation(_ entity: EntitySchema, _ constraint: [String], objects: [String]) -> JSONValue {
        [
            "entity": .string(entity.name), "constraint": .array(constraint.map { .string($0) }),
            "objects": .array(objects.map { .string($0) }),
        ]
    }
}
