/// One sort key of a fetch request, like `NSSortDescriptor`.
public struct SortDescriptor: Codable, Hashable, Sendable {
    /// The attribute or to-one key path to sort by.
    public var key: String
    /// Ascending (the default) or descending.
    public var ascending: Bool

    /// Creates a sort descriptor.
    public init(key: String, ascending: Bool = true) {
        self.key = key
        self.ascending = ascending
    }

    enum CodingKeys: String, CodingKey { case key, ascending }

    /// Decodes a descriptor; `ascending` defaults to `true`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        key = try container.decode(String.self, forKey: .key)
        ascending = try container.decodeIfPresent(Bool.self, forKey: .ascending) ?? true
    }
}

/// What a fetch returns.
public enum FetchResultType: String, Codable, Sendable, CaseIterable {
    /// Whole objects (the default).
    case objects
    /// Object ids only.
    case ids
    /// Plain dictionaries of the requested `properties`, without id, entity or version.
    case dictionaries
    /// The number of matches only.
    case count
}

/// A fetch request (DESIGN.md §5), like `NSFetchRequest`.
public struct FetchRequest: Codable, Hashable, Sendable {
    /// The entity to fetch.
    public var entity: String
    /// An `NSPredicate`-format string; `nil` matches everything.
    public var predicate: String?
    /// Bindings: an object for `$name` variables, an array for `%@ %K %d %f`.
    public var arguments: JSONValue?
    /// The order; ties are always broken by id.
    public var sort: [SortDescriptor]?
    /// The most objects to return.
    public var limit: Int?
    /// How many matches to skip.
    public var offset: Int?
    /// How many objects to read (and stream) at a time.
    public var batchSize: Int?
    /// What to return.
    public var resultType: FetchResultType?
    /// The keys to include; all attributes and to-one relationships when `nil`.
    public var properties: [String]?
    /// A token for work-done `$/progress`.
    public var workDoneToken: JSONValue?
    /// A token for streaming the objects as `$/progress` chunks.
    public var partialResultToken: JSONValue?
    /// Whether to count first so that progress has a total.
    public var countFirst: Bool?
    /// The attribute key paths (through to-one relationships) to group by: one
    /// dictionary per distinct combination of their values (DESIGN.md §5, Grouped fetches).
    public var groupBy: [String]?
    /// The aggregates computed over each group, named.
    public var aggregates: [ExpressionDescription]?
    /// A predicate over the groupBy keys and aggregate names that a group must
    /// pass (bound from ``arguments``, like ``predicate``).
    public var having: String?
    /// Relationship key paths whose objects the answer carries in `related`
    /// (DESIGN.md §5, Prefetching): to-one chains, to-many and many-to-many.
    public var prefetch: [String]?

    enum CodingKeys: String, CodingKey {
        case entity, predicate, arguments, sort, limit, offset, batchSize, resultType, properties, workDoneToken
        case partialResultToken, countFirst, groupBy, aggregates, having, prefetch
    }

    /// Creates a fetch request.
    public init(
        entity: String, predicate: String? = nil, arguments: JSONValue? = nil, sort: [SortDescriptor]? = nil,
        limit: Int? = nil, offset: Int? = nil, batchSize: Int? = nil, resultType: FetchResultType? = nil,
        properties: [String]? = nil, workDoneToken: JSONValue? = nil, partialResultToken: JSONValue? = nil,
        countFirst: Bool? = nil, groupBy: [String]? = nil, aggregates: [ExpressionDescription]? = nil,
        having: String? = nil, prefetch: [String]? = nil
    ) {
        self.entity = entity
        self.predicate = predicate
        self.arguments = arguments
        self.sort = sort
        self.limit = limit
        self.offset = offset
        self.batchSize = batchSize
        self.resultType = resultType
        self.properties = properties
        self.workDoneToken = workDoneToken
        self.partialResultToken = partialResultToken
        self.countFirst = countFirst
        self.groupBy = groupBy
        self.aggregates = aggregates
        self.having = having
        self.prefetch = prefetch
    }

    /// Whether the request groups (it has `groupBy`, `aggregates` or `having`):
    /// its answer is one dictionary per group.
    public var isGrouped: Bool { groupBy != nil || aggregates != nil || having != nil }
}

/// One aggregate of a grouped fetch, in the shape of Core Data's
/// `NSExpressionDescription`: the name it has in each group's dictionary, the
/// function, and the key path it reads.
public struct ExpressionDescription: Codable, Hashable, Sendable {
    /// The key of the aggregate's value in each group's dictionary.
    public var name: String
    /// What to compute over the group's objects.
    public var function: AggregateFunction
    /// The attribute key path (through to-one relationships) the function reads;
    /// may be left out for `count` only (then every object counts, else those whose value is not nil).
    public var key: String?

    /// Creates an aggregate.
    public init(name: String, function: AggregateFunction, key: String? = nil) {
        self.name = name
        self.function = function
        self.key = key
    }
}
