import DepotProtocol
import GRDB
import GRDBSQLite

/// What a prefetch read from one snapshot (DESIGN.md §5, Prefetching): the
/// related objects, once each, and which of them each row reaches.
public struct PrefetchedGraph: Sendable {
    /// The related objects' members of the `related` object, `"Entity/n":{…}`
    /// separated by commas, without the surrounding braces.
    public var json: [UInt8] = []
    /// The related ids, in the order of ``json``.
    public var ids: [String] = []
    /// The related ids each row links to, those the scope hides included
    /// (filled when asked for); the visible ones are in ``ids``.
    public var reach: [Int64: [String]] = [:]

    /// The `related` object: `{"Entity/n":{…},…}`.
    public var relatedObject: [UInt8] { [UInt8(ascii: "{")] + json + [UInt8(ascii: "}")] }
}

extension Store {
    /// Reads what `plan`'s hops reach from the rows `rows` of `entity` inside
    /// the read `db` (the snapshot the rows were read from): one statement per
    /// hop for the links and one for the objects it reaches, whatever the
    /// number of rows. An object outside `scopes` (read scopes by entity) is
    /// left out, and nothing is followed on from it.
    ///
    /// - Parameter reach: also work out which related ids each row reaches.
    static func prefetch(
        _ db: Database, plan: PrefetchPlan, rows: [Int64], schema: Schema, scopes: [String: PredicateNode]?,
        reach: Bool
    ) throws -> PrefetchedGraph {
        // Related objects carry no relationship to what the key cannot read.
        let schema = schema.visible(to: scopes)
        var graph = PrefetchedGraph()
        var written: Set<String> = []
        // Which rows reach each object of a level, when the reach is asked for.
        let rootsOfRows: [Int64: Set<Int64>] = reach ? Dictionary(uniqueKeysWithValues: rows.map { ($0, [$0]) }) : [:]
        func follow(_ hop: PrefetchPlan.Hop, from sources: [Int64], roots: [Int64: Set<Int64>]) throws {
            guard !sources.isEmpty, let source = schema.entity(named: hop.source),
                let destination = schema.entity(named: hop.destination)
            else { return }
            let links = try Self.links(db, hop: hop, source: source, destination: destination, from: sources)
            guard !links.isEmpty else { return }
            var targets = Array(Set(links.map(\.1)))
            targets.sort()
            let shape = try ObjectShape(
                entity: destination, properties: nil, alsoToMany: plan.relatedToManyKeys[destination.name] ?? [])
            let condition = try PredicateCompilation.whereClause(
                predicate: nil, arguments: nil, scope: scopes?[destination.name], entity: destination, schema: schema)
            let sql = """
                SELECT \(shape.selectList(schema: schema)) FROM \(destination.table) AS t0 \
                WHERE t0.id IN (SELECT value FROM json_each(?\(condition.arguments.count + 1))) AND (\(condition.sql)) \
                ORDER BY t0.id
                """
            let statement = try db.cachedStatement(sql: sql)
            let cursor = try Row.fetchCursor(
                statement, arguments: StatementArguments(condition.arguments + [Self.jsonArray(targets).databaseValue]))
            var visible: [Int64] = []
            while let row = try cursor.next() {
                let id: Int64 = row[0]
                visible.append(id)
                let text = "\(destination.name)/\(id)"
                guard written.insert(text).inserted else { continue }
                if !graph.json.isEmpty { graph.json.append(UInt8(ascii: ",")) }
                var writer = JSONWriter()
                writer.write(text)
                writer.writeRaw(":")
                shape.write(columnsOf: statement.sqliteStatement, into: &writer)
                graph.json += writer.bytes
                graph.ids.append(text)
            }
            var next: [Int64: Set<Int64>] = [:]
            if reach {
                // A hidden object is in the reach too (its change may show it), but nothing goes on from it.
                let shown = Set(visible)
                // One string per object, not per link: a level of 100k rows often reaches a few objects.
                var texts: [Int64: String] = [:]
                for (from, to) in links {
                    guard let reaching = roots[from] else { continue }
                    if shown.contains(to) { next[to, default: []].formUnion(reaching) }
                    let text = texts[to] ?? "\(destination.name)/\(to)"
                    texts[to] = text
                    for root in reaching { graph.reach[root, default: []].append(text) }
                }
            }
            for hop in hop.next { try follow(hop, from: visible, roots: next) }
        }
        for hop in plan.hops { try follow(hop, from: rows, roots: rootsOfRows) }
        return graph
    }

    /// The (source row, destination row) pairs of `hop` from `sources`, in one statement.
    private static func links(
        _ db: Database, hop: PrefetchPlan.Hop, source: EntitySchema, destination: EntitySchema, from sources: [Int64]
    ) throws -> [(Int64, Int64)] {
        let sql: String
        if !hop.toMany {
            let column = source.column(hop.relationship)
            sql =
                "SELECT t0.id, t0.\(column) FROM \(source.table) AS t0 WHERE t0.id IN (SELECT value FROM json_each(?)) AND t0.\(column) IS NOT NULL"
        } else if let join = source.joins[hop.relationship] {
            sql =
                "SELECT \(join.ownerColumn), \(join.memberColumn) FROM \(join.table) WHERE \(join.ownerColumn) IN (SELECT value FROM json_each(?))"
        } else if let inverse = source.toMany[hop.relationship]?.inverse {
            let column = destination.column(inverse)
            sql =
                "SELECT t0.\(column), t0.id FROM \(destination.table) AS t0 WHERE t0.\(column) IN (SELECT value FROM json_each(?))"
        } else {
            return []
        }
        var links: [(Int64, Int64)] = []
        let cursor = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: [Self.jsonArray(sources)])
        while let row = try cursor.next() { links.append((row[0], row[1])) }
        return links
    }

    /// The related objects `plan` reaches from `rows` of `entity`, read in one snapshot
    /// (what the fetched-results engine answers beside the rows it sends).
    public func prefetch(
        _ plan: PrefetchPlan, rows: [Int64], scopes: [String: PredicateNode]?, reach: Bool = false
    ) throws(RPCError) -> PrefetchedGraph {
        let schema = schema
        return try read { db in
            try Self.prefetch(db, plan: plan, rows: rows, schema: schema, scopes: scopes, reach: reach)
        }
    }
}

extension Store {
    /// The `related` members (`"Entity/n":{…}`, comma-separated) of `ids` as of
    /// this snapshot, in the shapes `plan` gives each entity; an id outside `scopes`
    /// or gone is left out. One statement per entity.
    public func relatedObjects(_ ids: some Sequence<String>, plan: PrefetchPlan, scopes: [String: PredicateNode]?)
        throws(RPCError) -> (json: [UInt8], ids: [String])
    {
        var byEntity: [String: [Int64]] = [:]
        for text in ids {
            guard let id = ObjectID(text) else { continue }
            byEntity[id.entity, default: []].append(id.row)
        }
        let schema = schema.visible(to: scopes)
        return try read { db in
            var json: [UInt8] = []
            var written: [String] = []
            for name in byEntity.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                guard let entity = schema.entity(named: name), let rows = byEntity[name] else { continue }
                let shape = try ObjectShape(
                    entity: entity, properties: nil, alsoToMany: plan.relatedToManyKeys[name] ?? [])
                let condition = try PredicateCompilation.whereClause(
                    predicate: nil, arguments: nil, scope: scopes?[name], entity: entity, schema: schema)
                let statement = try db.cachedStatement(
                    sql: """
                        SELECT \(shape.selectList(schema: schema)) FROM \(entity.table) AS t0 \
                        WHERE t0.id IN (SELECT value FROM json_each(?\(condition.arguments.count + 1))) AND (\(condition.sql)) \
                        ORDER BY t0.id
                        """)
                let cursor = try Row.fetchCursor(
                    statement,
                    arguments: StatementArguments(condition.arguments + [Self.jsonArray(rows.sorted()).databaseValue]))
                while let row = try cursor.next() {
                    let text = "\(name)/\(row[0] as Int64)"
                    var writer = JSONWriter()
                    if !json.isEmpty { writer.writeRaw(",") }
                    writer.write(text)
                    writer.writeRaw(":")
                    shape.write(columnsOf: statement.sqliteStatement, into: &writer)
                    json += writer.bytes
                    written.append(text)
                }
            }
            return (json, written)
        }
    }
}

extension SnapshotReader {
    /// ``Store/prefetch(_:rows:scopes:reach:)`` inside this snapshot.
    public func prefetch(_ plan: PrefetchPlan, rows: [Int64], scopes: [String: PredicateNode]?) throws
        -> PrefetchedGraph
    {
        try prefetchInSnapshot(plan, rows: rows, scopes: scopes)
    }
}
