import DepotProtocol

extension FetchRequest {
    /// A request for `entity` sorted by `sort`, with `fetchBatchSize` objects loaded at a time (0: all at once),
    /// and optionally a window of `fetchLimit` objects (0: all) after `fetchOffset`.
    public init(
        entity: String, predicate: String? = nil, arguments: JSONValue? = nil, sortDescriptors: [SortDescriptor],
        fetchLimit: Int = 0, fetchOffset: Int = 0, fetchBatchSize: Int = 0
    ) {
        self.init(
            entity: entity, predicate: predicate, arguments: arguments, sort: sortDescriptors,
            limit: fetchLimit > 0 ? fetchLimit : nil, offset: fetchOffset > 0 ? fetchOffset : nil,
            batchSize: fetchBatchSize > 0 ? fetchBatchSize : nil)
    }

    /// The sort descriptors, under Core Data's name.
    public var sortDescriptors: [SortDescriptor] {
        get { sort ?? [] }
        set { sort = newValue }
    }

    /// How many objects to load at a time (0: all at once), under Core Data's name.
    public var fetchBatchSize: Int {
        get { batchSize ?? 0 }
        set { batchSize = newValue > 0 ? newValue : nil }
    }
}

extension FetchRequest {
    /// A request in `NSPredicate` style: a format with `%@ %K %d %f` placeholders
    /// and ordinary Swift values for them, like
    /// `NSFetchRequest(entityName:)` with `NSPredicate(format:_:)`.
    ///
    /// ```swift
    /// let request = FetchRequest(
    ///     entityName: "Team", predicate: "qualifyingZone == %@ AND wins >= %d", "Europe", 3,
    ///     sortDescriptors: [SortDescriptor(key: "teamName")])
    /// ```
    public init(
        entityName: String, predicate format: String? = nil, _ arguments: any JSONValueConvertible...,
        sortDescriptors: [SortDescriptor] = [], fetchLimit: Int = 0, fetchOffset: Int = 0, fetchBatchSize: Int = 0
    ) {
        self.init(
            entity: entityName, predicate: format,
            arguments: arguments.isEmpty ? nil : .array(arguments.map(\.jsonValue)),
            sort: sortDescriptors.isEmpty ? nil : sortDescriptors, limit: fetchLimit > 0 ? fetchLimit : nil,
            offset: fetchOffset > 0 ? fetchOffset : nil, batchSize: fetchBatchSize > 0 ? fetchBatchSize : nil)
    }

    /// The entity's name, under Core Data's name.
    public var entityName: String {
        get { entity }
        set { entity = newValue }
    }

    /// The most objects to return (0: no limit), under Core Data's name. On a
    /// ``FetchedResultsController`` it keeps a live window (a top 10, a page):
    /// objects pushed out by changes elsewhere are deletes, objects pulled in inserts.
    public var fetchLimit: Int {
        get { limit ?? 0 }
        set { limit = newValue > 0 ? newValue : nil }
    }

    /// How many matches to skip (0: none), under Core Data's name. With
    /// ``fetchLimit`` it makes a page; on a ``FetchedResultsController`` the page stays live.
    public var fetchOffset: Int {
        get { offset ?? 0 }
        set { offset = newValue > 0 ? newValue : nil }
    }

    /// The keys to group by, under Core Data's name (``groupBy``): with ``aggregates``
    /// (Core Data's expression descriptions) the fetch returns one dictionary per group
    /// (``ObjectContext/fetchDictionaries(_:)``).
    public var propertiesToGroupBy: [String]? {
        get { groupBy }
        set { groupBy = newValue }
    }

    /// The predicate a group must pass, under Core Data's name (``having``).
    public var havingPredicate: String? {
        get { having }
        set { having = newValue }
    }

    /// The relationship key paths whose objects come with the results, under Core
    /// Data's name (``prefetch``, DESIGN.md §5): ``ObjectContext/fetch(_:)`` registers
    /// them, so ``DepotObject/relatedObject(_:)`` answers without a round trip, and a
    /// ``FetchedResultsController`` keeps them live (a renamed team updates the rows showing it).
    public var relationshipKeyPathsForPrefetching: [String]? {
        get { prefetch }
        set { prefetch = newValue?.isEmpty == true ? nil : newValue }
    }

    /// Whether the answer's elements are dictionaries rather than objects (a
    /// grouped fetch, or `resultType: dictionaries`).
    var answersDictionaries: Bool { isGrouped || resultType == .dictionaries }
}
