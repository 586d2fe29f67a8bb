import DepotProtocol

/// Why publishing a commit read the store (``ServerStats/StoreReads``).
enum StoreReadReason: Sendable {
    /// A snapshot of the store opened for the commit.
    case snapshot
    /// Changed rows' values that the commit did not hand over.
    case changedRows
    /// A predicate, sort or dependency through a relationship.
    case relationship
    /// A window refilling from beyond its edge.
    case windowRefill
    /// Values (include columns) a delta carries.
    case include
}

extension ServerStats.StoreReads {
    /// Counts one read for `reason`.
    mutating func count(_ reason: StoreReadReason) {
        switch reason {
        case .snapshot: snapshot += 1
        case .changedRows: changedRows += 1
        case .relationship: relationship += 1
        case .windowRefill: windowRefill += 1
        case .include: include += 1
        }
    }

    /// Adds `other`'s counts to these.
    mutating func add(_ other: Self) {
        commits += other.commits
        snapshot += other.snapshot
        changedRows += other.changedRows
        relationship += other.relationship
        windowRefill += other.windowRefill
        include += other.include
    }

    /// The reads, whatever their reason (commits not counted).
    var reads: Int64 { snapshot + changedRows + relationship + windowRefill + include }
}
