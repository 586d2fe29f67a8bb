import DepotProtocol
import Foundation
import GRDB

// MARK: - Delete rules

extension SaveOperation {
    /// The deletes plus everything their `cascade` rules reach, after checking `deny` rules.
    func expandDeletes(_ db: Database) throws -> [(ObjectID, EntitySchema)] {
        var ordered: [(ObjectID, EntitySchema)] = []
        var seen: Set<ObjectID> = []
        var queue = deletes.map { ($0.id, $0.entity) }
        while !queue.isEmpty {
            let (id, entity) = queue.removeFirst()
            guard seen.insert(id).inserted else { continue }
            ordered.append((id, entity))
            for relationship in entity.description.relationships where relationship.deleteRule == .cascade {
                guard let destination = schema.entity(named: relationship.destination) else { continue }
                for row in try relatedRows(db, of: id, entity: entity, relationship: relationship) {
                    queue.append((ObjectID(entity: destination.name, row: row), destination))
                }
            }
        }
        for (id, entity) in ordered {
            for relationship in entity.description.relationships where relationship.deleteRule == .deny {
                let blocking = try relatedRows(db, of: id, entity: entity, relationship: relationship)
                    .map { ObjectID(entity: relationship.destination, row: $0) }
                    .filter { !seen.contains($0) }
                if let first = blocking.first {
                    throw RPCError(
                        code: .deleteDenied,
                        message:
                            "cannot delete \(id): its relationship '\(relationship.name)' has the deny rule and still holds \(first)\(blocking.count > 1 ? " and \(blocking.count - 1) more" : "")",
                        data: [
                            "id": .string(id.description), "relationship": .string(relationship.name),
                            "objects": .array(blocking.map { .string($0.description) }),
                        ])
                }
            }
        }
        return ordered
    }

    /// The destination rows of `relationship` from object `id`.
    func relatedRows(_ db: Database, of id: ObjectID, entity: EntitySchema, relationship: RelationshipDescription)
        throws -> [Int64]
    {
        guard let destination = schema.entity(named: relationship.destination) else { return [] }
        if entity.joins[relationship.name] != nil {
            return try Int64.fetchAll(statement(db, entity, .members(relationship.name)), arguments: [id.row])
        }
        if relationship.toMany {
            guard let inverse = relationship.inverse else { return [] }
            return try Int64.fetchAll(statement(db, destination, .referencing(inverse)), arguments: [id.row])
        }
        let value = try Int64.fetchOne(statement(db, entity, .column(relationship.name)), arguments: [id.row])
        return value.map { [$0] } ?? []
    }

    mutating func applyDeletes(_ db: Database, _ targets: [(ObjectID, EntitySchema)]) throws {
        let doomed = Set(targets.map(\.0))
        for (id, entity) in targets {
            for relationship in entity.description.relationships {
                guard let destination = schema.entity(named: relationship.destination) else { continue }
                let related = try relatedRows(db, of: id, entity: entity, relationship: relationship)
                    .filter { !doomed.contains(ObjectID(entity: destination.name, row: $0)) }
                if entity.joins[relationship.name] != nil, let inverse = relationship.inverse {
                    // The pairs are the relationship itself: they go, whatever the rule (deny already passed).
                    try statement(db, entity, .deleteOwnerPairs(relationship.name)).execute(arguments: [id.row])
                    for row in related { recorder.update(destination.name, row, key: inverse) }
                    continue
                }
                guard let inverse = relationship.inverse, !related.isEmpty else { continue }
                if relationship.toMany {
                    guard relationship.deleteRule == .nullify || relationship.deleteRule == .cascade else { continue }
                    for row in related {
                        try statement(db, destination, .setColumn(inverse)).execute(arguments: [nil, row])
                        recorder.update(destination.name, row, key: inverse)
                    }
                } else {
                    // The destination's to-many loses this object.
                    for row in related { recorder.update(destination.name, row, key: inverse) }
                }
            }
            // To-one references without a declared inverse would dangle: clear them.
            for other in schema.entities {
                for relationship in other.toOne.values where relationship.destination == entity.name {
                    if let inverse = relationship.inverse, entity.toMany[inverse] != nil { continue }
                    let rows = try Int64.fetchAll(
                        statement(db, other, .referencing(relationship.name)), arguments: [id.row])
                    for row in rows where !doomed.contains(ObjectID(entity: other.name, row: row)) {
                        try statement(db, other, .setColumn(relationship.name)).execute(arguments: [nil, row])
                        recorder.update(other.name, row, key: relationship.name)
                    }
                }
            }
            try statement(db, entity, .delete).execute(arguments: [id.row])
            recorder.delete(entity.name, id.row)
            try tick()
        }
    }
}

// MARK: - Inserts and updates

extension SaveOperation {
    func resolve(_ reference: Reference) -> ObjectID? {
        switch reference {
        case .existing(let id): id
        case .temporary(let name): temporaryRows[name]
        }
    }

    mutating func applyInserts(_ db: Database) throws {
        for position in inserts.indices where !inserts[position].isUpsert {
            let insert = inserts[position]
            var columns: [Int] = []
            var arguments: [DatabaseValue] = []
            for (column, key) in insert.entity.columnKeys.enumerated() {
                if let value = insert.values[key] {
                    columns.append(column)
                    arguments.append(value)
                } else if case .existing(let id)?? = insert.toOne[key] {
                    columns.append(column)
                    arguments.append(id.row.databaseValue)
                }
            }
            do {
                try statement(db, insert.entity, .insert(columns)).execute(
                    arguments: StatementArguments(databaseValues: arguments))
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                throw RPCError(
                    code: .uniqueConstraint,
                    message:
                        "inserting \(insert.tempId ?? "inserted[\(insert.index)]") into \(insert.entity.name) violates a uniqueness constraint: \(error.message ?? "")"
                )
            }
            let row = db.lastInsertedRowID
            inserts[position].row = row
            recorder.insert(insert.entity.name, row)
            if let tempId = insert.tempId {
                temporaryRows[ByteString(tempId)] = ObjectID(entity: insert.entity.name, row: row)
            }
            for (key, reference) in insert.toOne {
                if case .existing(let id)? = reference { noteInverse(insert.entity, key: key, destinationRow: id.row) }
            }
        }
        // Upserts and folded duplicates resolve to rows that now exist.
        for position in inserts.indices where inserts[position].isUpsert {
            let insert = inserts[position]
            guard let marker = insert.row else { continue }
            let row = marker > 0 ? marker : inserts[Int(-marker - 1)].row ?? 0
            inserts[position].row = row
            let id = ObjectID(entity: insert.entity.name, row: row)
            if let tempId = insert.tempId { temporaryRows[ByteString(tempId)] = id }
            if !insert.upsertKeepsStore {
                updates.append(
                    Update(
                        index: -1, id: id, entity: insert.entity, values: insert.values, toOne: insert.toOne,
                        toMany: insert.toMany))
            }
        }
        // Second pass: references to other inserts of this save, and to-many values.
        for insert in inserts where !insert.isUpsert {
            guard let row = insert.row else { continue }
            for (key, reference) in insert.toOne {
                guard case .temporary? = reference, let target = reference.flatMap(resolve) else { continue }
                try statement(db, insert.entity, .setColumn(key)).execute(arguments: [target.row, row])
                noteInverse(insert.entity, key: key, destinationRow: target.row)
            }
            for (key, value) in insert.toMany {
                try setToMany(db, entity: insert.entity, row: row, key: key, to: value)
            }
        }
    }

    /// Records that the destination's inverse to-many changed.
    mutating func noteInverse(_ entity: EntitySchema, key: String, destinationRow: Int64) {
        guard let relationship = entity.toOne[key], let inverse = relationship.inverse else { return }
        recorder.update(relationship.destination, destinationRow, key: inverse)
    }

    mutating func applyUpdates(_ db: Database) throws {
        for update in updates {
            guard let row = try storedRow(db, update.id, entity: update.entity) else {
                throw RPCError.notFound("object \(update.id) was deleted by this same save", id: update.id.description)
            }
            var assignments: [Int] = []
            var arguments: [DatabaseValue] = []
            for (key, value) in update.values.sorted(by: { $0.key < $1.key })
            where !(row[key] ?? DatabaseValue.null).isSame(as: value) {
                guard let column = update.entity.columnIndexes[key] else { continue }
                assignments.append(column)
                arguments.append(value)
                recorder.update(update.entity.name, update.id.row, key: key)
            }
            for (key, reference) in update.toOne.sorted(by: { $0.key < $1.key }) {
                let target = reference.flatMap(resolve)
                let old = Int64.fromDatabaseValue(row[key] ?? .null)
                guard old != target?.row, let column = update.entity.columnIndexes[key] else { continue }
                assignments.append(column)
                arguments.append(target?.row.databaseValue ?? .null)
                recorder.update(update.entity.name, update.id.row, key: key)
                if let old { noteInverse(update.entity, key: key, destinationRow: old) }
                if let target { noteInverse(update.entity, key: key, destinationRow: target.row) }
            }
            if !assignments.isEmpty {
                do {
                    try statement(db, update.entity, .update(assignments)).execute(
                        arguments: StatementArguments(databaseValues: arguments + [update.id.row.databaseValue]))
                } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                    throw RPCError(
                        code: .uniqueConstraint,
                        message: "updating \(update.id) violates a uniqueness constraint: \(error.message ?? "")")
                }
            }
            for (key, value) in update.toMany {
                try setToMany(db, entity: update.entity, row: update.id.row, key: key, to: value)
            }
            try tick()
        }
    }

    /// Makes the to-many `key` of `row` hold `value` (the whole set, or the
    /// current one with members added and removed): by moving the destinations'
    /// inverse column, or, for a many-to-many, by changing pairs in its join table.
    mutating func setToMany(_ db: Database, entity: EntitySchema, row: Int64, key: String, to value: ToManyValue)
        throws
    {
        guard let relationship = entity.toMany[key], let inverse = relationship.inverse,
            let destination = schema.entity(named: relationship.destination)
        else { return }
        let isManyToMany = entity.joins[key] != nil
        let current: Set<Int64>
        if isManyToMany {
            current = Set(try Int64.fetchAll(statement(db, entity, .members(key)), arguments: [row]))
        } else {
            current = Set(try Int64.fetchAll(statement(db, destination, .referencing(inverse)), arguments: [row]))
        }
        let desired: Set<Int64>
        switch value {
        case .replace(let references): desired = Set(references.compactMap { resolve($0)?.row })
        case .change(let add, let remove):
            desired = current.union(add.compactMap { resolve($0)?.row }).subtracting(
                remove.compactMap { resolve($0)?.row })
        }
        if isManyToMany {
            try setPairs(
                db, owner: row, from: current, to: desired, entity: entity, key: key, destination: destination,
                inverse: inverse)
            return
        }
        for removed in current.subtracting(desired).sorted() {
            try statement(db, destination, .setColumn(inverse)).execute(arguments: [nil, removed])
            recorder.update(destination.name, removed, key: inverse)
        }
        for added in desired.subtracting(current).sorted() {
            if let owner = try Int64.fetchOne(statement(db, destination, .column(inverse)), arguments: [added]) {
                recorder.update(entity.name, owner, key: key)
            }
            try statement(db, destination, .setColumn(inverse)).execute(arguments: [row, added])
            recorder.update(destination.name, added, key: inverse)
        }
        if desired != current { recorder.update(entity.name, row, key: key) }
    }

    /// Makes the many-to-many `key` of `owner`, which holds the rows `current`,
    /// hold exactly the rows `desired`, by deleting and inserting pairs; both
    /// sides of every changed pair are recorded.
    mutating func setPairs(
        _ db: Database, owner: Int64, from current: Set<Int64>, to desired: Set<Int64>,
        entity: EntitySchema, key: String, destination: EntitySchema, inverse: String
    ) throws {
        for removed in current.subtracting(desired).sorted() {
            try statement(db, entity, .deletePair(key)).execute(arguments: [owner, removed])
            recorder.update(destination.name, removed, key: inverse)
        }
        for added in desired.subtracting(current).sorted() {
            try statement(db, entity, .insertPair(key)).execute(arguments: [owner, added])
            recorder.update(destination.name, added, key: inverse)
        }
        if desired != current { recorder.update(entity.name, owner, key: key) }
    }

    /// Bumps versions, records the transaction and builds the result.
    mutating func finish(_ db: Database) throws -> (StoreSave.Result, CommittedTransaction?) {
        var ids: [String: String] = [:]
        for insert in inserts {
            if let tempId = insert.tempId, let id = temporaryRows[ByteString(tempId)] { ids[tempId] = id.description }
        }
        guard
            let (transaction, updatedVersions) = try recorder.commit(
                db, schema: schema, statements: statements, author: author, retention: retention,
                captured: scopeCapture)
        else {
            return (StoreSave.Result(ids: ids, versions: [:], transaction: 0), nil)
        }
        var versions = updatedVersions
        for (name, change) in transaction.changes {
            for row in change.inserted { versions["\(name)/\(row)"] = 1 }
        }
        return (StoreSave.Result(ids: ids, versions: versions, transaction: transaction.number), transaction)
    }
}

extension Store {
    /// `store/save`: validates, resolves conflicts and commits atomically.
    ///
    /// A save with a `saveId` that already committed is not run again: it is
    /// answered with its first answer and no transaction (``SaveIdLog``).
    /// The id is looked up inside the write, so a save that queued behind its
    /// twin, or a replica's write run again under the cluster's lock, finds it.
    ///
    /// - Returns: the result for the client and, when anything changed, the
    ///   committed transaction for notifications.
    /// - Parameter group: a group commit to join (in a savepoint of its own); its own transaction when `nil`.
    /// - Parameter writeScope: the requesting key's write scope: a save that breaks it is -32018 and commits nothing.
    public func save(_ params: StoreSave.Parameters, in group: WriteGroup? = nil, writeScope: WriteScope)
        throws(RPCError) -> (
            StoreSave.Result, CommittedTransaction?
        )
    {
        if let saveId = params.saveId { try SaveIdLog.validate(saveId) }
        return try reportingWrite(in: group) { db in
            if let saveId = params.saveId, let answer = try SaveIdLog.answer(db, saveId: saveId) {
                return (answer, nil)
            }
            // The model as of the write (a replica may have applied a model change at its start).
            var operation = SaveOperation(
                schema: self.schema, statements: saveStatements, policy: params.mergePolicy ?? .error,
                author: params.author)
            operation.retention = historyRetention
            operation.scopeCapture = scopeCapture
            operation.writeScope = writeScope
            let (answer, transaction) = try operation.run(db, params: params)
            if let saveId = params.saveId, transaction != nil {
                try SaveIdLog.record(db, saveId: saveId, answer: answer)
            }
            return (answer, transaction)
        }
    }
}
