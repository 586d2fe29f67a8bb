/// `store/fetch`: objects, ids, dictionaries or a count matching a fetch request.
public enum StoreFetch: Method {
    public static let name = "store/fetch"
    public typealias Parameters = FetchRequest

    /// The matches; which member is set follows `resultType`.
    public struct Result: Codable, Hashable, Sendable {
        /// Objects or dictionaries (`objects`, `dictionaries`).
        public var objects: [JSONValue]?
        /// Ids (`ids`).
        public var ids: [String]?
        /// The number of matches (`count`, or with partial results).
        public var count: Int?
        /// The last transaction the fetch saw.
        public var transaction: Int64
        /// With `prefetch`: every object the key paths reach from the rows, once each, by id.
        public var related: [String: JSONValue]?

        /// Creates the result.
        public init(
            objects: [JSONValue]? = nil, ids: [String]? = nil, count: Int? = nil, transaction: Int64,
            related: [String: JSONValue]? = nil
        ) {
            self.objects = objects
            self.ids = ids
            self.count = count
            self.transaction = transaction
            self.related = related
        }
    }
}

/// `store/count`: the number of objects matching a fetch request.
public enum StoreCount: Method {
    public static let name = "store/count"
    public typealias Parameters = FetchRequest

    /// The count.
    public struct Result: Codable, Hashable, Sendable {
        /// The number of matches.
        public var count: Int

        /// Creates the result.
        public init(count: Int) { self.count = count }
    }
}

/// `store/get`: objects by id, `null` where an id does not exist.
public enum StoreGet: Method {
    public static let name = "store/get"

    /// The ids.
    public struct Parameters: Codable, Hashable, Sendable {
        /// Object ids such as `Team/42`.
        public var ids: [String]
        /// The keys to include; all when `nil`.
        public var properties: [String]?

        /// Creates the params.
        public init(ids: [String], properties: [String]? = nil) {
            self.ids = ids
            self.properties = properties
        }
    }

    /// The objects, in the order of the ids.
    public struct Result: Codable, Hashable, Sendable {
        /// An object or `null` per id.
        public var objects: [JSONValue]

        /// Creates the result.
        public init(objects: [JSONValue]) { self.objects = objects }
    }
}

/// How a save resolves conflicts with newer store values (Core Data's merge policies).
public enum MergePolicy: String, Codable, Sendable, CaseIterable {
    /// Fail with -32012 (the default).
    case error
    /// Property by property, the save's values win.
    case objectTrump
    /// Property by property, the store's changed values win.
    case storeTrump
    /// The save's whole object wins.
    case overwrite
    /// The conflicting object's changes are dropped.
    case rollback
}

/// One object to insert.
public struct InsertedObject: Codable, Hashable, Sendable {
    /// The entity.
    public var entity: String
    /// A name for the object within this save, usable in relationship values.
    public var tempId: String?
    /// Attribute and relationship values.
    public var values: [String: JSONValue]

    /// Creates an insert.
    public init(entity: String, tempId: String? = nil, values: [String: JSONValue]) {
        self.entity = entity
        self.tempId = tempId
        self.values = values
    }

    enum CodingKeys: String, CodingKey { case entity, tempId, values }

    /// Decodes an insert; `values` defaults to empty.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        entity = try container.decode(String.self, forKey: .entity)
        tempId = try container.decodeIfPresent(String.self, forKey: .tempId)
        values = try container.decodeIfPresent([String: JSONValue].self, forKey: .values) ?? [:]
    }
}

/// One object to change.
public struct UpdatedObject: Codable, Hashable, Sendable {
    /// The object's id.
    public var id: String
    /// The version the change was based on; older than the store's is a conflict.
    public var version: Int64?
    /// The values the change was based on; a store value that differs is a conflict.
    public var original: [String: JSONValue]?
    /// The new values.
    public var values: [String: JSONValue]

    /// Creates an update.
    public init(id: String, version: Int64? = nil, original: [String: JSONValue]? = nil, values: [String: JSONValue]) {
        self.id = id
        self.version = version
        self.original = original
        self.values = values
    }
}

/// One object to delete.
public struct DeletedObject: Codable, Hashable, Sendable {
    /// The object's id.
    public var id: String
    /// The version the delete was based on; older than the store's is a conflict.
    public var version: Int64?

    /// Creates a delete.
    public init(id: String, version: Int64? = nil) {
        self.id = id
        self.version = version
    }
}

/// `store/save`: one atomic transaction of inserts, updates and deletes (DESIGN.md §6).
public enum StoreSave: Method {
    public static let name = "store/save"

    /// The changes.
    public struct Parameters: Codable, Hashable, Sendable {
        /// Objects to insert.
        public var inserted: [InsertedObject]
        /// Objects to change.
        public var updated: [UpdatedObject]
        /// Objects to delete.
        public var deleted: [DeletedObject]
        /// How to resolve conflicts; `error` by default.
        public var mergePolicy: MergePolicy?
        /// Who made the change, recorded in history and `store/didSave`.
        public var author: String?
        /// The client's name for this save (1 to 128 characters): a save whose `saveId` already
        /// committed is not applied again but answered with its first answer, so a client may
        /// resend a save whose answer it never got.
        public var saveId: String?

        /// Creates the params.
        public init(
            inserted: [InsertedObject] = [], updated: [UpdatedObject] = [], deleted: [DeletedObject] = [],
            mergePolicy: MergePolicy? = nil, author: String? = nil, saveId: String? = nil
        ) {
            self.inserted = inserted
            self.updated = updated
            self.deleted = deleted
            self.mergePolicy = mergePolicy
            self.author = author
            self.saveId = saveId
        }

        enum CodingKeys: String, CodingKey { case inserted, updated, deleted, mergePolicy, author, saveId }

        /// Decodes the params; the lists default to empty.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            inserted = try container.decodeIfPresent([InsertedObject].self, forKey: .inserted) ?? []
            updated = try container.decodeIfPresent([UpdatedObject].self, forKey: .updated) ?? []
            deleted = try container.decodeIfPresent([DeletedObject].self, forKey: .deleted) ?? []
            mergePolicy = try container.decodeIfPresent(MergePolicy.self, forKey: .mergePolicy)
            author = try container.decodeIfPresent(String.self, forKey: .author)
            saveId = try container.decodeIfPresent(String.self, forKey: .saveId)
        }
    }

    /// What the save committed.
    public struct Result: Codable, Hashable, Sendable {
        /// The permanent id of each inserted object, by `tempId`.
        public var ids: [String: String]
        /// The new version of every inserted or changed object, by id.
        public var versions: [String: Int64]
        /// The transaction's number; 0 when the save changed nothing.
        public var transaction: Int64

        /// Creates the result.
        public init(ids: [String: String], versions: [String: Int64], transaction: Int64) {
            self.ids = ids
            self.versions = versions
            self.transaction = transaction
        }
    }
}

/// The changes of one committed transaction to one entity.
public struct EntityChanges: Codable, Hashable, Sendable {
    /// One changed object and the keys that changed.
    public struct Update: Codable, Hashable, Sendable {
        /// The object's id.
        public var id: String
        /// The attribute and relationship names whose values changed.
        public var keys: [String]

        /// Creates an update record.
        public init(id: String, keys: [String]) {
            self.id = id
            self.keys = keys
        }
    }

    /// Ids of inserted objects.
    public var inserted: [String]
    /// Changed objects with their changed keys.
    public var updated: [Update]
    /// Ids of deleted objects.
    public var deleted: [String]

    /// Creates the record.
    public init(inserted: [String] = [], updated: [Update] = [], deleted: [String] = []) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }

    /// Whether nothing changed.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }
}

/// `store/observe`: subscribes the session to `store/didSave`.
public enum StoreObserve: Method {
    public static let name = "store/observe"

    /// Which saves to hear about.
    public struct Parameters: Codable, Hashable, Sendable {
        /// Only transactions touching these entities; all when `nil`.
        public var entities: [String]?
        /// Whether notifications carry the changed objects' values.
        public var includeValues: Bool?

        /// Creates the params.
        public init(entities: [String]? = nil, includeValues: Bool? = nil) {
            self.entities = entities
            self.includeValues = includeValues
        }
    }

    /// The observer's handle.
    public struct Result: Codable, Hashable, Sendable {
        /// The observer's id, for `store/unobserve`.
        public var observer: String

        /// Creates the result.
        public init(observer: String) { self.observer = observer }
    }
}

/// `store/unobserve`: ends an observer.
public enum StoreUnobserve: Method {
    public static let name = "store/unobserve"

    /// The observer to end.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The id `store/observe` returned.
        public var observer: String

        /// Creates the params.
        public init(observer: String) { self.observer = observer }
    }

    public typealias Result = Null
}

/// `store/didSave`: sent to observers after every commit (`NSManagedObjectContextDidSave` across processes).
public enum DidSave: NotificationMethod {
    public static let name = "store/didSave"

    /// One committed transaction.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The observer this notification is for.
        public var observer: String?
        /// The transaction's number.
        public var transaction: Int64
        /// Who made it, if the save said.
        public var author: String?
        /// The changes, by entity.
        public var changes: [String: EntityChanges]
        /// The inserted and changed objects' new values, by id, when the observer asked.
        public var objects: [String: JSONValue]?

        /// Creates the params.
        public init(
            observer: String? = nil, transaction: Int64, author: String?, changes: [String: EntityChanges],
            objects: [String: JSONValue]? = nil
        ) {
            self.observer = observer
            self.transaction = transaction
            self.author = author
            self.changes = changes
            self.objects = objects
        }
    }
}

/// `store/observeDidEnd`: the daemon ended an observer; no `store/didSave` for it follows.
///
/// Sent when the observer of a key with a row-level scope could not judge its
/// scope (a read failed, or a runaway `MATCHES` was stopped): it must neither
/// hear of objects outside the scope nor miss one leaving it, so it ends, and
/// the client observes again (and fetches) once the cause is fixed.
public enum ObserveDidEnd: NotificationMethod {
    public static let name = "store/observeDidEnd"

    /// Which observer ended and why.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The observer that ended.
        public var observer: String
        /// Why: `error` (its scope could not be evaluated).
        public var reason: String
        /// What failed, as the daemon's error said it.
        public var message: String
        /// The transaction it could not judge; `nil` when its start (the ids in scope) failed.
        public var transaction: Int64?

        /// Creates the params.
        public init(observer: String, reason: String, message: String, transaction: Int64? = nil) {
            self.observer = observer
            self.reason = reason
            self.message = message
            self.transaction = transaction
        }
    }
}

/// One committed transaction as history keeps it.
public struct TransactionRecord: Codable, Hashable, Sendable {
    /// The transaction's number.
    public var transaction: Int64
    /// When it committed, ISO 8601 UTC.
    public var timestamp: String
    /// Who made it, if the save said.
    public var author: String?
    /// The changes, by entity.
    public var changes: [String: EntityChanges]

    /// Creates a record.
    public init(transaction: Int64, timestamp: String, author: String?, changes: [String: EntityChanges]) {
        self.transaction = transaction
        self.timestamp = timestamp
        self.author = author
        self.changes = changes
    }
}

/// `store/history`: the committed transactions after `since` (persistent history).
public enum StoreHistory: Method {
    public static let name = "store/history"

    /// Where to start.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The last transaction the client has seen (0 for all kept).
        public var since: Int64
        /// The most transactions to return.
        public var limit: Int?

        /// Creates the params.
        public init(since: Int64, limit: Int? = nil) {
            self.since = since
            self.limit = limit
        }
    }

    /// The transactions, oldest first.
    public struct Result: Codable, Hashable, Sendable {
        /// The transactions after `since`.
        public var transactions: [TransactionRecord]
        /// The newest committed transaction's number.
        public var latest: Int64
        /// The oldest transaction still kept, so a client can tell when it missed some.
        public var oldest: Int64

        /// Creates the result.
        public init(transactions: [TransactionRecord], latest: Int64, oldest: Int64) {
            self.transactions = transactions
            self.latest = latest
            self.oldest = oldest
        }
    }
}
