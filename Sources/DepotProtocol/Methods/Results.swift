/// How much of the results `results/subscribe` returns at once.
public enum ResultsInclude: String, Codable, Sendable, CaseIterable {
    /// The first `batchSize` objects (the default).
    case firstBatch
    /// Every object.
    case all
    /// Sections and count only (`"none"` on the wire); objects by `results/objects`.
    case noObjects = "none"
}

/// One section of fetched results.
public struct SectionInfo: Codable, Hashable, Sendable {
    /// The section key's value as text; `""` for nil.
    public var name: String
    /// The name's capitalised first letter.
    public var indexTitle: String
    /// How many objects the section has.
    public var count: Int

    /// Creates a section.
    public init(name: String, indexTitle: String, count: Int) {
        self.name = name
        self.indexTitle = indexTitle
        self.count = count
    }

    /// Equal when the name's and title's bytes are (DESIGN.md §4).
    public static func == (lhs: SectionInfo, rhs: SectionInfo) -> Bool {
        lhs.name.bytesEqual(rhs.name) && lhs.indexTitle.bytesEqual(rhs.indexTitle) && lhs.count == rhs.count
    }

    /// Hashes the name's bytes.
    public func hash(into hasher: inout Hasher) {
        ByteString.hash(name, into: &hasher)
        hasher.combine(count)
    }
}

/// `results/subscribe`: a live, sorted, sectioned fetch (DESIGN.md §7).
public enum ResultsSubscribe: Method {
    public static let name = "results/subscribe"

    /// The request to keep live.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The fetch request; `sort` is required.
        public var request: FetchRequest
        /// The key path whose value names each object's section.
        public var sectionKeyPath: String?
        /// A name under which the ordered ids persist across restarts.
        public var cacheName: String?
        /// How many objects to return now.
        public var include: ResultsInclude?
        /// A token for work-done `$/progress` while the results are built.
        public var workDoneToken: JSONValue?
        /// Fold the transactions of this many milliseconds into one notification.
        public var coalesceMs: Int?
        /// The results the client holds, to answer with what changed since (DESIGN.md §7, Resuming).
        public var resume: ResultsResume?

        /// Creates the params.
        public init(
            request: FetchRequest, sectionKeyPath: String? = nil, cacheName: String? = nil,
            include: ResultsInclude? = nil, workDoneToken: JSONValue? = nil, coalesceMs: Int? = nil,
            resume: ResultsResume? = nil
        ) {
            self.request = request
            self.sectionKeyPath = sectionKeyPath
            self.cacheName = cacheName
            self.include = include
            self.workDoneToken = workDoneToken
            self.coalesceMs = coalesceMs
            self.resume = resume
        }
    }

    /// The results as of `transaction`.
    public struct Result: Codable, Hashable, Sendable {
        /// The subscription's id.
        public var subscription: String
        /// Always 0: the first `results/didChange` carries 1.
        public var seq: Int64
        /// The last transaction the results include.
        public var transaction: Int64
        /// How many objects match.
        public var count: Int
        /// The sections, in order (one unnamed section without a key path).
        public var sections: [SectionInfo]
        /// The first objects, as `include` asked.
        public var objects: [JSONValue]
        /// Whether the results were read from the named cache.
        public var fromCache: Bool?
        /// With `prefetch`: the objects the answered rows reach, by id (DESIGN.md §7).
        public var related: [String: JSONValue]?
        /// With `resume`: `true` when the answer names only what changed (``changed``), `false`
        /// when it is a full one.
        public var resumed: Bool?
        /// With `resume`: the digest of the whole current id list (``ResultsDigest``).
        public var digest: String?
        /// In a resumed answer: each row that may have moved, entered, left or changed since
        /// the client's transaction, with its current index path or none.
        public var changed: [ResumedRow]?

        /// Creates the result.
        public init(
            subscription: String, seq: Int64, transaction: Int64, count: Int, sections: [SectionInfo],
            objects: [JSONValue], fromCache: Bool? = nil, resumed: Bool? = nil, digest: String? = nil,
            changed: [ResumedRow]? = nil
        ) {
            self.subscription = subscription
            self.seq = seq
            self.transaction = transaction
            self.count = count
            self.sections = sections
            self.objects = objects
            self.fromCache = fromCache
            self.resumed = resumed
            self.digest = digest
            self.changed = changed
        }
    }
}

/// `resume` of `results/subscribe`: the results a client holds of the same request.
public struct ResultsResume: Codable, Hashable, Sendable {
    /// The transaction the held results reflect.
    public var transaction: Int64
    /// The held ordered id list's digest (``ResultsDigest``).
    public var digest: String

    /// Creates the resume point.
    public init(transaction: Int64, digest: String) {
        self.transaction = transaction
        self.digest = digest
    }
}

/// One row named by a resumed `results/subscribe` answer.
public struct ResumedRow: Codable, Hashable, Sendable {
    /// The object's (or group's) id.
    public var id: String
    /// Where it is now; absent when it is not in the results any more.
    public var indexPath: [Int]?
    /// Its current values (or group dictionary), as `include` says; absent for rows that left.
    public var object: JSONValue?

    /// Creates a named row.
    public init(id: String, indexPath: [Int]? = nil, object: JSONValue? = nil) {
        self.id = id
        self.indexPath = indexPath
        self.object = object
    }
}

/// `results/objects`: a page of a subscription's objects, by flat offset (batch faulting).
public enum ResultsObjects: Method {
    public static let name = "results/objects"

    /// The page.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The subscription.
        public var subscription: String
        /// The first flat index.
        public var offset: Int
        /// How many objects.
        public var length: Int

        /// Creates the params.
        public init(subscription: String, offset: Int, length: Int) {
            self.subscription = subscription
            self.offset = offset
            self.length = length
        }
    }

    /// The objects as of `seq`.
    public struct Result: Codable, Hashable, Sendable {
        /// The sequence number the page belongs to.
        public var seq: Int64
        /// The objects.
        public var objects: [JSONValue]
        /// With `prefetch`: the objects these rows reach, by id (DESIGN.md §7).
        public var related: [String: JSONValue]?

        /// Creates the result.
        public init(seq: Int64, objects: [JSONValue]) {
            self.seq = seq
            self.objects = objects
        }
    }
}

/// `results/snapshot`: the whole ordered id list, for resync.
public enum ResultsSnapshot: Method {
    public static let name = "results/snapshot"

    /// The subscription.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The subscription.
        public var subscription: String

        /// Creates the params.
        public init(subscription: String) { self.subscription = subscription }
    }

    /// The results' shape as of `seq`.
    public struct Result: Codable, Hashable, Sendable {
        /// The sequence number the snapshot belongs to.
        public var seq: Int64
        /// The last transaction it includes.
        public var transaction: Int64
        /// The sections.
        public var sections: [SectionInfo]
        /// Every id, in order.
        public var ids: [String]

        /// Creates the result.
        public init(seq: Int64, transaction: Int64, sections: [SectionInfo], ids: [String]) {
            self.seq = seq
            self.transaction = transaction
            self.sections = sections
            self.ids = ids
        }
    }
}

/// `results/unsubscribe`: ends a subscription.
public enum ResultsUnsubscribe: Method {
    public static let name = "results/unsubscribe"
    public typealias Parameters = ResultsSnapshot.Parameters
    public typealias Result = Null
}

/// `results/deleteCache`: removes a named cache, or all when no name is given.
public enum ResultsDeleteCache: Method {
    public static let name = "results/deleteCache"

    /// The cache to delete.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The name; every cache when `nil`.
        public var cacheName: String?

        /// Creates the params.
        public init(cacheName: String? = nil) { self.cacheName = cacheName }
    }

    public typealias Result = Null
}

/// One section change of a `results/didChange`.
public struct SectionChange: Codable, Hashable, Sendable {
    /// Insert or delete.
    public enum Kind: String, Codable, Sendable {
        case insert, delete
    }

    /// Insert or delete.
    public var type: Kind
    /// The section's index: in the old results for deletes, the new ones for inserts.
    public var index: Int
    /// The section's name.
    public var name: String

    /// Creates a section change.
    public init(type: Kind, index: Int, name: String) {
        self.type = type
        self.index = index
        self.name = name
    }

    /// Equal when the name's bytes are (DESIGN.md §4): two spellings are two sections.
    public static func == (lhs: SectionChange, rhs: SectionChange) -> Bool {
        lhs.type == rhs.type && lhs.index == rhs.index && lhs.name.bytesEqual(rhs.name)
    }

    /// Hashes the name's bytes.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(type)
        hasher.combine(index)
        ByteString.hash(name, into: &hasher)
    }
}

/// One object change of a `results/didChange`.
public struct ObjectChange: Codable, Hashable, Sendable {
    /// The kind of change, as in `NSFetchedResultsChangeType`.
    public enum Kind: String, Codable, Sendable {
        case insert, delete, move, update
    }

    /// The kind of change.
    public var type: Kind
    /// The position in the old results (delete, move, update).
    public var indexPath: [Int]?
    /// The position in the new results (insert, move, update).
    public var newIndexPath: [Int]?
    /// The object's id (always present).
    public var id: String
    /// The object's new values (insert, move, update).
    public var object: JSONValue?

    /// Creates an object change.
    public init(type: Kind, indexPath: [Int]? = nil, newIndexPath: [Int]? = nil, id: String, object: JSONValue? = nil) {
        self.type = type
        self.indexPath = indexPath
        self.newIndexPath = newIndexPath
        self.id = id
        self.object = object
    }
}

/// `results/didChange`: the deltas one transaction made to a subscription's results.
public enum ResultsDidChange: NotificationMethod {
    public static let name = "results/didChange"

    /// The deltas.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The subscription.
        public var subscription: String
        /// One more than the previous notification's.
        public var seq: Int64
        /// The transaction that made the change (the last one when coalesced).
        public var transaction: Int64
        /// `[first, last]` when several transactions were coalesced.
        public var transactions: [Int64]?
        /// Section inserts and deletes.
        public var sections: [SectionChange]
        /// Object inserts, deletes, moves and updates.
        public var objects: [ObjectChange]
        /// With `prefetch`: objects the rows now reach that are new to the client or changed, by id.
        public var related: [String: JSONValue]?
        /// With `prefetch`: ids no row reaches any more.
        public var relatedRemoved: [String]?

        /// Creates the params.
        public init(
            subscription: String, seq: Int64, transaction: Int64, transactions: [Int64]? = nil,
            sections: [SectionChange], objects: [ObjectChange]
        ) {
            self.subscription = subscription
            self.seq = seq
            self.transaction = transaction
            self.transactions = transactions
            self.sections = sections
            self.objects = objects
        }
    }
}

/// `results/didInvalidate`: the subscription's deltas stopped; resync with `results/snapshot`.
public enum ResultsDidInvalidate: NotificationMethod {
    public static let name = "results/didInvalidate"

    /// Why.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The subscription.
        public var subscription: String
        /// `overflow` when the session's queue overflowed, `largeTransaction`, `error`, `rebuilt`
        /// when a cluster daemon rebuilt its replica from the cluster's snapshot, `scope`, or `model`
        /// when a migration renamed a key the request names (the subscription ended).
        public var reason: String

        /// Creates the params.
        public init(subscription: String, reason: String) {
            self.subscription = subscription
            self.reason = reason
        }
    }
}
