import DepotProtocol
import Foundation
import GRDB

extension Store {
    /// Streams every object that matches grouped `plan`'s predicate to `body`
    /// as its id and the values of ``GroupedFetchPlan/memberKeyPaths`` (as SQL
    /// orders and groups them), unordered; returns the transaction the read saw.
    ///
    /// A live grouped result (DESIGN.md §7) is built from this once, then kept
    /// from the changed rows (``groupMembers(_:among:)``).
    public func groupMembers(
        _ plan: GroupedFetchPlan, cancellation: Cancellation? = nil, _ body: (Int64, [SortValue]) -> Void
    ) throws(RPCError) -> Int64 {
        try read { db in
            let transaction = try Self.latestTransaction(db)
            let cursor = try Row.fetchCursor(
                db, sql: plan.membersSQL, arguments: StatementArguments(plan.memberArguments))
            let watchdog = watchdog(of: db)
            var count = 0
            while let row = try cursor.next() {
                watchdog?.progressed()
                body(row[0], Self.memberValues(row, count: plan.memberKeyPaths.count))
                count += 1
                if count % 10_000 == 0 { try cancellation?.check() }
            }
            return transaction
        }
    }

    /// The rows among `ids` that match grouped `plan`'s predicate, each with the
    /// values of ``GroupedFetchPlan/memberKeyPaths``: a transaction's changed rows only.
    public func groupMembers(_ plan: GroupedFetchPlan, among ids: [Int64]) throws(RPCError) -> [Int64: [SortValue]] {
        guard !ids.isEmpty else { return [:] }
        return try read { db in
            // The condition numbers its parameters ?1…?n; the id list comes after them.
            let idsParameter = "?\(plan.memberArguments.count + 1)"
            let sql =
                "\(plan.membersSQL) AND t0.id IN (SELECT value FROM json_each(\(idsParameter)))"
            let arguments = plan.memberArguments + [Self.jsonArray(ids).databaseValue]
            var result: [Int64: [SortValue]] = [:]
            for row in try Row.fetchAll(db, sql: sql, arguments: StatementArguments(arguments)) {
                result[row[0]] = Self.memberValues(row, count: plan.memberKeyPaths.count)
            }
            return result
        }
    }

    private static func memberValues(_ row: Row, count: Int) -> [SortValue] {
        var values: [SortValue] = []
        values.reserveCapacity(count)
        for index in 0..<count { values.append(SortValue(row[index + 1] as DatabaseValue)) }
        return values
    }
}

extension SortValue {
    /// The wire value of a stored value of an attribute of `type` (a date as its ISO 8601 text).
    public func wire(as type: AttributeType) -> JSONValue {
        let stored: DatabaseValue
        switch self {
        case .null: stored = .null
        case .integer(let number): stored = number.databaseValue
        case .real(let number): stored = number.databaseValue
        case .text(let text): stored = text.databaseValue
        case .blob(let bytes): stored = Data(bytes).databaseValue
        }
        return ValueCoding.json(stored, type: type)
    }
}
