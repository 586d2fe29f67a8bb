import DepotProtocol
import GRDB

/// One SQLite transaction shared by several requests that queued behind each
/// other (group commit), each running in a savepoint of its own: a request
/// that fails rolls back only its savepoint and gets its own error; the
/// others commit together, paying for one commit instead of one each.
///
/// Valid only inside the body of ``Store/writeGroup(_:)``.
public final class WriteGroup: @unchecked Sendable {
    // @unchecked: used only on the writer, inside the group's transaction.
    let db: Database

    fileprivate init(db: Database) { self.db = db }
}

extension Store {
    /// Runs `body` inside one write transaction, committed when it returns;
    /// ``write(in:_:)`` with the group runs each request in a savepoint.
    ///
    /// - Throws: when the transaction cannot begin or commit; every request
    ///   of the group then failed, whatever its savepoint did.
    public func writeGroup(_ body: (WriteGroup) -> Void) throws(RPCError) {
        try write { db in body(WriteGroup(db: db)) }
    }

    /// Runs `body` in `group`'s transaction, in a savepoint of its own, or in a
    /// transaction of its own when there is no group.
    func write<T>(in group: WriteGroup?, _ body: (Database) throws -> T) throws(RPCError) -> T {
        guard let group else { return try write(body) }
        return try Self.mapErrors {
            var result: T?
            try group.db.inSavepoint {
                result = try body(group.db)
                return .commit
            }
            return result!
        }
    }
}
