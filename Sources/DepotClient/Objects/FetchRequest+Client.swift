import DepotProtocol

extension FetchRequest {
    /// A request for `entity` sorted by `sort`, with `fetchBatchSize` objects loaded at a time (0: all at once).
    public init(
        entity: String, predicate: String? = nil, arguments: JSONValue? = nil, sortDescriptors: [SortDescriptor],
        fetchBatchSize: Int = 0
    ) {
        self.init(
            entity: entity, predicate: predicate, arguments: arguments, sort: sortDescriptors,
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
