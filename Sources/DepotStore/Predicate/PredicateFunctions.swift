import DepotProtocol
import Foundation
import GRDB
import Synchronization

/// The SQL functions compiled predicates call, registered on every connection.
///
/// SQLite's own `LIKE` and `lower()` fold only ASCII; these fold Unicode the
/// way the in-memory evaluator does, so `[c]` and `[d]` mean the same in both.
enum PredicateFunctions {
    static func register(in db: Database) {
        db.add(
            function: DatabaseFunction("depot_fold", argumentCount: 2, pure: true) { values in
                guard let text = String.fromDatabaseValue(values[0]) else { return nil }
                return PredicateText.fold(text, Int.fromDatabaseValue(values[1]) ?? 0)
            })
        db.add(
            function: DatabaseFunction("depot_glob", argumentCount: 1, pure: true) { values in
                String.fromDatabaseValue(values[0]).map(PredicateText.glob)
            })
        db.add(
            function: DatabaseFunction("depot_glob_literal", argumentCount: 1, pure: true) { values in
                String.fromDatabaseValue(values[0]).map(PredicateText.globLiteral)
            })
        let cache = PredicateText.RegexCache()
        db.add(
            function: DatabaseFunction("depot_matches", argumentCount: 3, pure: true) { values in
                guard let text = String.fromDatabaseValue(values[0]), let pattern = String.fromDatabaseValue(values[1])
                else { return nil }
                // A runaway pattern fails the statement with the timeout's message (-32602 in Store).
                return try PredicateText.matches(
                    text, pattern, flags: Int.fromDatabaseValue(values[2]) ?? 0, cache: cache)
            })
    }
}
