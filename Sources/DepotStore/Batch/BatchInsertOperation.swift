import DepotProtocol
import GRDB
import GRDBSQLite

/// `store/batchInsert`: many objects of one entity in one transaction, with
/// find-or-create over the entity's uniqueness constraints (DESIGN.md §6).
///
/// Unlike a save it keeps per-object work to the minimum a million rows can
/// afford: values are checked and converted once (by the typed path of
/// ``BatchRows`` where it can), rows are bound straight into one prepared
/// INSERT held for the batch, and a row is looked up only when the entity has
/// uniqueness constraints. Objects come one at a time (``add(_:at:_:)``), so a
/// streamed request never holds them all; every problem is reported at once
/// and the transaction rolls back, so the batch is all or nothing.
struct BatchInsertOperation {
    let schema: Schema
    /// The writer's prepared statements (``SaveStatements``): the commit's version bumps.
    let statements: SaveStatements
    let entity: EntitySchema
    let onConflict: ConflictResolution
    let author: String?
    var cancellation: Cancellation?
    var progress: ((Int) -> Void)?
    var retention: HistoryRetention = .forever
    /// The keys whose values history records, by entity (``ScopeCapture``); empty for none.
    var scopeCapture: [String: [String]] = [:]
    /// The requesting key's write scope: an object merged into must be in it
    /// before, and every object written must be in it after (checked at the end).
    let writeScope: WriteScope

    private typealias Row = BatchRows.Row

    private let columns: [String]
    private let defaults: [DatabaseValue?]
    /// Per uniqueness constraint, its column positions.
    private let constraints: [[Int]]
    private let insertSQL: String
    /// The to-one columns with an inverse: (position, destination, inverse key).
    private let inverses: [(position: Int, destination: String, inverse: String)]
    /// The prepared INSERT, taken from the statement cache at the batch's first insert.
    private var insertStatement: Statement?

    // What the batch has done so far.
    private var recorder = ChangeRecorder()
    private var inserted = 0
    private var updated = 0
    private var ignored = 0
    private var count = 0
    /// The rows inserted so far, in order: recorded as inserted at the end, at once.
    private var insertedRows: [Int64] = []
    /// Rows this batch wrote, by constraint values: later duplicates within the batch find them.
    private var written: [[StoredValue]: Int64] = [:]
    /// The objects checked and converted so far, their problems and the rows they reference.
    private var rows: BatchRows
    /// Rows written (inserted or updated), checked against ``writeScope`` at the end.
    private var writtenRows: [Int64] = []

    init(
        schema: Schema, statements: SaveStatements, entity: EntitySchema, onConflict: ConflictResolution,
        author: String?, typed: Bool = true, writeScope: WriteScope
    ) {
        self.writeScope = writeScope
        self.schema = schema
        self.statements = statements
        self.entity = entity
        self.onConflict = onConflict
        self.author = author
        columns = entity.columnKeys
        rows = BatchRows(entity: entity, typed: typed, withheld: writeScope.withheldKeys(of: entity))
        defaults = entity.columnKeys.map { key in
            guard let value = entity.attributes[key]?.defaultValue, !value.isNull,
                let type = entity.attributes[key]?.type
            else { return nil }
            return try? ValueCoding.databaseValue(value, type: type)
        }
        constraints = entity.description.uniquenessConstraints.map { keys in
            keys.compactMap { entity.columnKeys.firstIndex(of: $0) }
        }
        inverses = entity.columnKeys.enumerated().compactMap { position, key in
            guard let relationship = entity.toOne[key], let inverse = relationship.inverse else { return nil }
            return (position, relationship.destination, inverse)
        }
        insertSQL =
            "INSERT INTO \(entity.table) (_version, \(columns.map(entity.column).joined(separator: ", "))) VALUES (1\(String(repeating: ", ?", count: columns.count)))"
    }

    /// Inserts `objects` and commits the transaction's history (inside `db`'s transaction).
    mutating func run(_ db: Database, objects: [[String: JSONValue]]) throws -> (
        BatchInsert.Result, CommittedTransaction?
    ) {
        for (index, object) in objects.enumerated() { try add(object, at: index, db) }
        return try finish(db)
    }

    /// Inserts rows checked and converted before the transaction began
    /// (``BatchRows``, built against this operation's schema), and commits the
    /// transaction's history: the writer does only what needs the store.
    mutating func run(_ db: Database, converted: BatchRows) throws -> (BatchInsert.Result, CommittedTransaction?) {
        rows = converted
        if rows.problemCount == 0 {
            for (index, row) in converted.rows.enumerated() { try add(row, at: index, db) }
        }
        count = converted.count
        return try finish(db)
    }

    /// Checks, converts and writes one object. Every object is checked; once
    /// one has a problem nothing more is written, and ``finish(_:)`` reports
    /// every problem at once (the caller's transaction then rolls back).
    mutating func add(_ object: [String: JSONValue], at index: Int, _ db: Database) throws {
        let row = (rows.problemCount == 0 ? rows.convertTyped(object) : nil) ?? rows.convert(object, at: index)
        guard rows.problemCount == 0 else {
            count = index + 1
            return
        }
        try add(row, at: index, db)
    }

    /// Writes one object read from a streamed request's bytes by the typed
    /// path (``BatchRows/readTyped(_:)``); `false` when that path does not
    /// take it (the caller then reads it again for ``add(_:at:_:)``).
    mutating func add(reading reader: inout JSONStreamReader, at index: Int, _ db: Database) throws -> Bool {
        guard rows.problemCount == 0, let row = try rows.readTyped(&reader) else { return false }
        try add(row, at: index, db)
        return true
    }

    /// Writes one converted object: found over the uniqueness constraints, or inserted.
    private mutating func add(_ row: Row, at index: Int, _ db: Database) throws {
        count = index + 1
        if index % 1000 == 999 {
            try cancellation?.check()
            progress?(index + 1)
        }
        var existing: Int64?
        var signatures: [[StoredValue]] = []
        for (number, constraint) in constraints.enumerated() {
            let values = constraint.map { row[$0] ?? .null }
            if values.contains(.null) { continue }
            let signature = ([number.databaseValue] + values).map(StoredValue.init)
            signatures.append(signature)
            if existing == nil {
                existing = try written[signature] ?? find(db, constraint: constraint, values: values, columns: columns)
            }
        }
        if let existing {
            switch onConflict {
            case .error:
                throw RPCError(
                    code: .uniqueConstraint,
                    message:
                        "objects[\(index)] collides with \(entity.name)/\(existing) on a uniqueness constraint of \(entity.name); nothing was inserted (use onConflict update or ignore)",
                    data: [
                        "entity": .string(entity.name),
                        "objects": [.string("objects[\(index)]"), .string("\(entity.name)/\(existing)")],
                    ])
            case .ignore:
                ignored += 1
            case .update:
                try writeScope.check(
                    [ObjectID(entity: entity.name, row: existing)], in: db, schema: schema, when: "before the update")
                if !writeScope.isUnrestricted { writtenRows.append(existing) }
                if try update(db, row: existing, with: row, columns: columns, recorder: &recorder) {
                    updated += 1
                } else {
                    ignored += 1
                }
            }
            return
        }
        let rowID = try insert(row, at: index, db)
        if !writeScope.isUnrestricted { writtenRows.append(rowID) }
        insertedRows.append(rowID)
        noteInverses(of: row, columns: columns, old: nil, recorder: &recorder, row: rowID)
        for signature in signatures { written[signature] = rowID }
        inserted += 1
    }

    /// Inserts one row: its values, or the attribute's default where it gives none or null.
    ///
    /// Bound straight into the held statement with GRDB's own binding of
    /// each ``DatabaseValue`` (the bytes stored are those of a GRDB execute),
    /// without building statement arguments per row.
    private mutating func insert(_ row: Row, at index: Int, _ db: Database) throws -> Int64 {
        let statement: Statement
        if let held = insertStatement {
            statement = held
        } else {
            statement = try db.cachedStatement(sql: insertSQL)
            sqlite3_reset(statement.sqliteStatement)
            insertStatement = statement
        }
        let handle = statement.sqliteStatement
        for (position, given) in row.enumerated() {
            var value = given ?? .null
            if value.isNull, let fallback = defaults[position] { value = fallback }
            let code = value.bind(to: handle, at: CInt(position + 1))
            guard code == SQLITE_OK else { throw failure(code, db) }
        }
        let code = sqlite3_step(handle)
        guard code == SQLITE_DONE else {
            let error = failure(code, db)
            sqlite3_reset(handle)
            guard error.resultCode == .SQLITE_CONSTRAINT else { throw error }
            throw RPCError(
                code: .uniqueConstraint,
                message: "objects[\(index)] violates a uniqueness constraint of \(entity.name): \(error.message ?? "")")
        }
        sqlite3_reset(handle)
        return sqlite3_last_insert_rowid(db.sqliteConnection)
    }

    /// The error SQLite reported for the INSERT, as GRDB reports it.
    private func failure(_ code: CInt, _ db: Database) -> DatabaseError {
        DatabaseError(
            resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
            sql: insertSQL)
    }

    /// Reports the problems found, if any (-32010), else records the transaction.
    mutating func finish(_ db: Database) throws -> (BatchInsert.Result, CommittedTransaction?) {
        recorder.insert(entity.name, rows: insertedRows)
        insertedRows = []
        // By destination name: the problems come in one order whichever path noted the references first.
        for (name, rowsReferenced) in rows.references.sorted(by: { $0.key < $1.key }) {
            guard let destination = schema.entity(named: name) else { continue }
            for row in rowsReferenced.sorted()
            where try
                !(Bool.fetchOneCached(db, sql: "SELECT 1 FROM \(destination.table) WHERE id = ?", arguments: [row])
                ?? false)
            {
                rows.problem(-1, nil, "badReference", "\(name)/\(row) does not exist")
            }
        }
        if rows.problemCount > 0 {
            let (problems, problemCount) = (rows.problems, rows.problemCount)
            let first = problems.first?["message"]?.stringValue ?? ""
            throw RPCError(
                code: .validationFailed,
                message:
                    "the batch is invalid (\(problemCount) problem\(problemCount == 1 ? "" : "s")\(problemCount > problems.count ? ", the first \(problems.count) listed" : "")): \(first)",
                data: ["errors": .array(problems), "count": .int(Int64(problemCount))])
        }
        // With the objects at the other end of the relationships the batch set (their inverse changed).
        try writeScope.check(
            writtenRows.map { ObjectID(entity: entity.name, row: $0) } + recorder.updatedRows, in: db, schema: schema,
            when: "after the batch")
        try cancellation?.check()
        progress?(count)
        let committed = try recorder.commit(
            db, schema: schema, statements: statements, author: author, retention: retention,
            captured: scopeCapture)?.0
        return (
            BatchInsert.Result(
                inserted: inserted, updated: updated, ignored: ignored, transaction: committed?.number ?? 0), committed
        )
    }

    /// The existing row whose `constraint` columns hold `values`.
    private func find(_ db: Database, constraint: [Int], values: [DatabaseValue], columns: [String]) throws -> Int64? {
        let condition = constraint.map { "\(entity.column(columns[$0])) = ?" }.joined(separator: " AND ")
        return try Int64.fetchOneCached(
            db, sql: "SELECT id FROM \(entity.table) WHERE \(condition) LIMIT 1", arguments: StatementArguments(values))
    }

    /// Writes the given values that differ from the stored row; returns whether anything changed.
    private func update(
        _ db: Database, row rowID: Int64, with row: Row, columns: [String], recorder: inout ChangeRecorder
    ) throws -> Bool {
        guard
            let stored = try GRDB.Row.fetchOneCached(
                db, sql: "SELECT * FROM \(entity.table) WHERE id = ?", arguments: [rowID])
        else { return false }
        var assignments: [String] = []
        var arguments: [DatabaseValue] = []
        var old: [Int: DatabaseValue] = [:]
        for (position, value) in row.enumerated() {
            guard let value, !(stored[columns[position]] ?? DatabaseValue.null).isSame(as: value) else { continue }
            old[position] = stored[columns[position]] ?? .null
            assignments.append("\(entity.column(columns[position])) = ?")
            arguments.append(value)
            recorder.update(entity.name, rowID, key: columns[position])
        }
        guard !assignments.isEmpty else { return false }
        try db.executeCached(
            sql: "UPDATE \(entity.table) SET \(assignments.joined(separator: ", ")) WHERE id = ?",
            arguments: StatementArguments(arguments + [rowID.databaseValue]))
        var changed = Row(repeating: nil, count: row.count)
        for position in old.keys { changed[position] = row[position] }
        noteInverses(of: changed, columns: columns, old: old, recorder: &recorder, row: rowID)
        return true
    }

    /// Records that destinations of changed to-one values gained or lost this row in their to-many.
    private func noteInverses(
        of row: Row, columns: [String], old: [Int: DatabaseValue]?, recorder: inout ChangeRecorder, row rowID: Int64
    ) {
        for (position, destination, inverse) in inverses {
            guard let value = row[position] else { continue }
            if let target = Int64.fromDatabaseValue(value) {
                recorder.update(destination, target, key: inverse)
            }
            if let previous = old?[position].flatMap(Int64.fromDatabaseValue) {
                recorder.update(destination, previous, key: inverse)
            }
        }
    }
}
