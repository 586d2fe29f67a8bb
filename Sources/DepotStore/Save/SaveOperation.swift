import DepotProtocol
import GRDB

/// One `store/save`, run inside the writer's transaction (DESIGN.md §6).
///
/// It works in phases so that nothing is written before everything is known
/// to be valid: resolve and validate every object (reporting all problems at
/// once), detect conflicts and apply the merge policy, check uniqueness
/// (erroring or turning inserts into updates), check `deny` rules, then apply
/// and record the changes. Any throw rolls the whole transaction back.
struct SaveOperation {
    /// A relationship value: an existing object or an insert of this save.
    enum Reference: Hashable {
        case existing(ObjectID)
        case temporary(ByteString)
    }

    /// A to-many value: the whole new set (an array), or members to add and remove (`{add, remove}`).
    enum ToManyValue {
        case replace([Reference])
        case change(add: [Reference], remove: [Reference])
    }

    struct Insert {
        var index: Int
        var entity: EntitySchema
        var tempId: String?
        var values: [String: DatabaseValue]
        var toOne: [String: Reference?]
        var toMany: [String: ToManyValue]
        /// The existing row this insert became an update of (upsert), or the row it was inserted as.
        var row: Int64?
        /// Set when the insert folded into an existing row instead of inserting.
        var upsertKeepsStore = false
        var isUpsert = false
    }

    struct Update {
        var index: Int
        var id: ObjectID
        var entity: EntitySchema
        var version: Int64?
        var original: [String: JSONValue]?
        var values: [String: DatabaseValue]
        var toOne: [String: Reference?]
        var toMany: [String: ToManyValue]
        var keys: Set<String> { Set(values.keys).union(toOne.keys).union(toMany.keys) }
    }

    struct Delete {
        var id: ObjectID
        var entity: EntitySchema
        var version: Int64?
    }

    let schema: Schema
    /// The writer's prepared statements (``SaveStatements``).
    let statements: SaveStatements
    let policy: MergePolicy
    let author: String?
    var inserts: [Insert] = []
    var updates: [Update] = []
    var deletes: [Delete] = []
    var problems: [JSONValue] = []
    var recorder = ChangeRecorder()
    /// Rows by tempId once inserted (or matched by an upsert).
    var temporaryRows: [ByteString: ObjectID] = [:]
    /// Stops a long save (batch update or delete) between chunks; throwing rolls it back.
    var cancellation: Cancellation?
    /// How long history keeps transactions (pruned as this one is recorded).
    var retention: HistoryRetention = .forever
    /// The keys whose values history records, by entity (``ScopeCapture``); empty for none.
    var scopeCapture: [String: [String]] = [:]
    /// Told how many objects were applied so far (batch operations' progress).
    var progress: ((Int) -> Void)?
    /// The requesting key's write scope, checked before and after the writes.
    var writeScope: WriteScope = .unrestricted
    private var applied = 0

    /// Counts one applied object; every 500 checks for cancellation and reports progress.
    mutating func tick() throws {
        applied += 1
        guard applied % 500 == 0 else { return }
        try cancellation?.check()
        progress?(applied)
    }

    init(schema: Schema, statements: SaveStatements, policy: MergePolicy, author: String?) {
        self.schema = schema
        self.statements = statements
        self.policy = policy
        self.author = author
    }

    mutating func problem(_ object: String, _ key: String?, _ code: String, _ message: String) {
        var members: [String: JSONValue] = [
            "object": .string(object), "code": .string(code), "message": .string(message),
        ]
        members["key"] = key.map { .string($0) } ?? .null
        problems.append(.object(members))
    }

    /// The entity `name` as the saving key knows it: `nil` for an unknown one, and for one the key
    /// cannot read (``WriteScope/hidden``), which does not exist for it.
    func knownEntity(_ name: String) -> EntitySchema? {
        writeScope.hidden.contains(name) ? nil : schema.entity(named: name)
    }

    /// Whether `key` of `entity` is a relationship to an entity the saving key cannot read: it does
    /// not exist for that key either (DESIGN.md §2).
    func isWithheld(_ key: String, of entity: EntitySchema) -> Bool {
        !writeScope.hidden.isEmpty && writeScope.withheldKeys(of: entity).contains(key)
    }

    /// `entity`'s keys as the saving key knows them, for error messages.
    func keyList(of entity: EntitySchema) -> String {
        guard !writeScope.hidden.isEmpty else { return entity.keyList }
        let keys = entity.description.attributes.map(\.name) + entity.description.relationships.map(\.name)
        return keys.filter { !isWithheld($0, of: entity) }.joined(separator: ", ")
    }

    /// Runs the whole save on `db`, inside the caller's transaction.
    mutating func run(_ db: Database, params: StoreSave.Parameters) throws -> (StoreSave.Result, CommittedTransaction?)
    {
        try resolve(db, params: params)
        try resolveConflicts(db)
        try resolveUniqueness(db)
        let deleteSet = try expandDeletes(db)
        try checkScopeBefore(db, deleting: deleteSet)
        try applyDeletes(db, deleteSet)
        try applyInserts(db)
        try applyUpdates(db)
        try checkScopeAfter(db)
        return try finish(db)
    }
}

// MARK: - Resolving and validating

extension SaveOperation {
    mutating func resolve(_ db: Database, params: StoreSave.Parameters) throws {
        // tempIds are the client's text: two spellings are two tempIds (DESIGN.md §4).
        var tempIds: [ByteString: String] = [:]
        var spellings: [String: String] = [:]  // by canonical equivalence, to find look-alikes
        for (index, object) in params.inserted.enumerated() {
            guard let tempId = object.tempId.map({ ByteString($0) }) else { continue }
            if tempIds[tempId] != nil {
                problem(
                    "inserted[\(index)]", "tempId", "duplicateTempId",
                    "tempId '\(tempId)' is used by more than one insert")
            } else if let other = spellings.updateValue(tempId.string, forKey: tempId.string) {
                // The answer's `ids` is a `[String: String]`, which cannot hold both.
                problem(
                    "inserted[\(index)]", "tempId", "duplicateTempId",
                    "tempIds \(ByteString(other).escaped) and \(tempId.escaped) differ only in Unicode normalization; give the inserts tempIds that differ as text"
                )
            }
            tempIds[tempId] = object.entity
        }
        for (index, object) in params.inserted.enumerated() {
            let name = object.tempId ?? "inserted[\(index)]"
            guard let entity = knownEntity(object.entity) else {
                problem(name, "entity", "unknownEntity", "unknown entity '\(object.entity)'")
                continue
            }
            var insert = Insert(
                index: index, entity: entity, tempId: object.tempId, values: [:], toOne: [:], toMany: [:])
            resolveValues(
                db, object.values, entity: entity, object: name, tempIds: tempIds, into: &insert.values, &insert.toOne,
                &insert.toMany)
            for attribute in entity.description.attributes
            where insert.values[attribute.name] == nil || insert.values[attribute.name] == .null {
                if let value = attribute.defaultValue, !value.isNull,
                    let stored = try? ValueCoding.databaseValue(value, type: attribute.type)
                {
                    insert.values[attribute.name] = stored
                } else if !attribute.optional && (object.values[attribute.name] ?? .null).isNull {
                    problem(name, attribute.name, "required", "\(entity.name).\(attribute.name) is required")
                }
            }
            for relationship in entity.toOne.values where !relationship.optional {
                if insert.toOne[relationship.name] == nil || insert.toOne[relationship.name]! == nil {
                    problem(name, relationship.name, "required", "\(entity.name).\(relationship.name) is required")
                }
            }
            inserts.append(insert)
        }
        for (index, object) in params.updated.enumerated() {
            guard let id = ObjectID(object.id) else {
                problem(
                    object.id, "id", "badId", "'\(object.id)' is not an object id (Entity/number) at updated[\(index)]")
                continue
            }
            guard let entity = knownEntity(id.entity) else {
                problem(object.id, "id", "unknownEntity", "unknown entity '\(id.entity)'")
                continue
            }
            if index % 500 == 499 { try cancellation?.check() }
            guard try exists(db, id, entity: entity) else {
                throw RPCError.notFound("updated[\(index)]: object \(object.id) does not exist", id: object.id)
            }
            var update = Update(
                index: index, id: id, entity: entity, version: object.version, original: object.original, values: [:],
                toOne: [:], toMany: [:])
            resolveValues(
                db, object.values, entity: entity, object: object.id, tempIds: tempIds, into: &update.values,
                &update.toOne, &update.toMany)
            for (key, value) in update.values where value == .null && entity.attributes[key]?.optional == false {
                problem(object.id, key, "required", "\(entity.name).\(key) is required and cannot be set to null")
            }
            for (key, value) in update.toOne where value == nil && entity.toOne[key]?.optional == false {
                problem(object.id, key, "required", "\(entity.name).\(key) is required and cannot be set to null")
            }
            if let original = object.original {
                for key in original.keys where !entity.hasKey(key) {
                    problem(object.id, key, "unknownKey", "original names unknown key '\(key)' of \(entity.name)")
                }
            }
            updates.append(update)
        }
        for (index, object) in params.deleted.enumerated() {
            guard let id = ObjectID(object.id), let entity = knownEntity(id.entity) else {
                problem(
                    object.id, "id", "badId",
                    "'\(object.id)' is not an object id of a known entity at deleted[\(index)]")
                continue
            }
            guard try exists(db, id, entity: entity) else {
                throw RPCError.notFound("deleted[\(index)]: object \(object.id) does not exist", id: object.id)
            }
            deletes.append(Delete(id: id, entity: entity, version: object.version))
        }
        if !problems.isEmpty {
            let count = problems.count
            let first = problems.first?["message"]?.stringValue ?? ""
            throw RPCError(
                code: .validationFailed,
                message:
                    "the save is invalid (\(count) problem\(count == 1 ? "" : "s")): \(first)\(count > 1 ? "; …" : "")",
                data: ["errors": .array(problems)])
        }
    }

    func exists(_ db: Database, _ id: ObjectID, entity: EntitySchema) throws -> Bool {
        try Bool.fetchOne(statement(db, entity, .exists), arguments: [id.row]) ?? false
    }

    /// The prepared statement of `shape` on `entity`'s table (``SaveStatements``).
    func statement(_ db: Database, _ entity: EntitySchema, _ shape: SaveStatements.Shape) throws -> Statement {
        try statements.statement(db, entity, shape, version: schema.version)
    }

    /// Sorts `values` into attributes, to-one and to-many references, noting every problem.
    mutating func resolveValues(
        _ db: Database, _ values: [String: JSONValue], entity: EntitySchema, object: String,
        tempIds: [ByteString: String],
        into attributes: inout [String: DatabaseValue], _ toOne: inout [String: Reference?],
        _ toMany: inout [String: ToManyValue]
    ) {
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            if isWithheld(key, of: entity) {
                problem(object, key, "unknownKey", "\(entity.name) has no key '\(key)' (keys: \(keyList(of: entity)))")
            } else if let attribute = entity.attributes[key] {
                do {
                    attributes[key] = try ValueCoding.databaseValue(value, type: attribute.type)
                } catch {
                    problem(
                        object, key, "type", "\(entity.name).\(key) must be \(error.expected), got \(value.excerpt())")
                }
            } else if let relationship = entity.toOne[key] {
                if value.isNull {
                    toOne[key] = .some(nil)
                } else if let reference = reference(
                    db, value, destination: relationship.destination, object: object, key: key, tempIds: tempIds)
                {
                    toOne[key] = reference
                }
            } else if let relationship = entity.toMany[key] {
                func references(_ elements: [JSONValue]) -> [Reference] {
                    elements.compactMap {
                        reference(
                            db, $0, destination: relationship.destination, object: object, key: key, tempIds: tempIds)
                    }
                }
                switch value {
                case .array(let elements):
                    toMany[key] = .replace(references(elements))
                case .object(let members)
                where !members.isEmpty
                    && members.allSatisfy({ ["add", "remove"].contains($0.key) && $0.value.arrayValue != nil }):
                    toMany[key] = .change(
                        add: references(members["add"]?.arrayValue ?? []),
                        remove: references(members["remove"]?.arrayValue ?? []))
                default:
                    problem(
                        object, key, "type",
                        "\(entity.name).\(key) is to-many and must be an array of ids (the whole set) or {\"add\": [ids], \"remove\": [ids]}, got \(value.excerpt())"
                    )
                }
            } else {
                problem(object, key, "unknownKey", "\(entity.name) has no key '\(key)' (keys: \(keyList(of: entity)))")
            }
        }
    }

    mutating func reference(
        _ db: Database, _ value: JSONValue, destination: String, object: String, key: String,
        tempIds: [ByteString: String]
    ) -> Reference? {
        guard case .string(let text) = value else {
            problem(object, key, "type", "\(key) must be an object id or tempId, got \(value.excerpt())")
            return nil
        }
        if let entityName = tempIds[ByteString(text)] {
            guard entityName == destination else {
                problem(
                    object, key, "badReference",
                    "\(key) must refer to a \(destination), but tempId '\(text)' is a \(entityName)")
                return nil
            }
            return .temporary(ByteString(text))
        }
        guard let id = ObjectID(text), id.entity == destination, let entity = schema.entity(named: destination) else {
            problem(
                object, key, "badReference",
                "\(key) must be the id of a \(destination) or a tempId of this save, got '\(text)'")
            return nil
        }
        guard (try? exists(db, id, entity: entity)) == true else {
            problem(object, key, "badReference", "\(key) refers to \(text), which does not exist")
            return nil
        }
        return .existing(id)
    }
}
