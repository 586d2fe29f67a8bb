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

    /// Creates a fetch request.
    public init(
        entity: String, predicate: String? = nil, arguments: JSONValue? = nil, sort: [SortDescriptor]? = nil,
        limit: Int? = nil, offset: Int? = nil, batchSize: Int? = nil, resultType: FetchResultType? = nil,
        properties: [String]? = nil, workDoneToken: JSONValue? = nil, partialResultToken: JSONValue? = nil,
        countFirst: Bool? = nil
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
    }
}
