import GRDB

// The save path runs the same few statements for every object: preparing
// them once per connection (GRDB's statement cache) instead of per call
// halves the cost of a small save.
extension Database {
    /// Executes `sql` through the connection's statement cache.
    func executeCached(sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }
}

extension Row {
    /// One row, through the statement cache.
    static func fetchOneCached(_ db: Database, sql: String, arguments: StatementArguments = StatementArguments()) throws
        -> Row?
    {
        try fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }
}

extension DatabaseValueConvertible {
    /// One value, through the statement cache.
    static func fetchOneCached(_ db: Database, sql: String, arguments: StatementArguments = StatementArguments()) throws
        -> Self?
    {
        try fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }

    /// Every value, through the statement cache.
    static func fetchAllCached(_ db: Database, sql: String, arguments: StatementArguments = StatementArguments()) throws
        -> [Self]
    {
        try fetchAll(db.cachedStatement(sql: sql), arguments: arguments)
    }
}

extension StatementArguments {
    /// Positional arguments from values already converted.
    ///
    /// GRDB's generic `init(_:)` maps its elements with a key path that it
    /// builds anew at every call (an allocation and metadata look-ups, a few
    /// percent of a small save). An array of existentials takes GRDB's
    /// specialized initializer instead, which maps with a closure.
    init(databaseValues values: [DatabaseValue]) {
        self.init(values.map { $0 as (any DatabaseValueConvertible)? })
    }
}
