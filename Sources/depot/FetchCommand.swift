import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

/// What to fetch: shared by `depot fetch` and `depot export`.
struct FetchOptions: ParsableArguments {
    @Argument(help: "The entity to fetch.")
    var entity: String

    @Option(help: "An NSPredicate-format filter, e.g. 'wins > 2 AND qualifyingZone == \"Europe\"'.")
    var predicate: String?

    @Option(help: "The predicate's arguments as JSON (an object for $variables, an array for %@).")
    var arguments: String?

    @Option(help: "A sort key, key or key:desc (or key:asc); repeatable, in order.")
    var sort: [String] = []

    @Option(help: "The most objects to return.")
    var limit: Int?

    @Option(help: "How many matching objects to skip.")
    var offset: Int?

    @Option(help: "Objects the daemon reads (and reports progress for) at a time.")
    var batchSize = 1000

    @Flag(help: "Show a progress bar on standard error (the default when it is a terminal and the fetch is long).")
    var progress = false

    func validate() throws {
        if let limit, limit < 0 { throw ValidationError("--limit must not be negative, got \(limit)") }
        if let offset, offset < 0 { throw ValidationError("--offset must not be negative, got \(offset)") }
        guard batchSize > 0 else { throw ValidationError("--batch-size must be positive, got \(batchSize)") }
    }

    /// The fetch request the options describe.
    func request() throws -> FetchRequest {
        FetchRequest(
            entity: entity, predicate: predicate,
            arguments: try arguments.map { try parseJSONArgument($0, what: "--arguments") },
            sort: try parseSortKeys(sort), limit: limit, offset: offset, batchSize: batchSize)
    }

    /// Fetches every matching object, drawing progress on standard error when
    /// asked to, or when it is a terminal and the fetch takes more than half a second.
    func fetch(_ client: DepotConnection) async throws -> [DepotObject] {
        let request = try request()
        let running: AsynchronousFetchResult<DepotObject>
        do {
            running = try await client.execute(AsynchronousFetchRequest(fetchRequest: request))
        } catch {
            throw describe(error, calling: StoreFetch.name)
        }
        let forced = progress
        let entity = entity
        let drawer = Task {
            var line = ProgressLine()
            var last = ""
            let start = ContinuousClock.now
            for await update in running.progressUpdates where !update.isFinished {
                guard forced || (line.isTerminal && ContinuousClock.now - start > .milliseconds(500)) else { continue }
                let text = progressBar(update, entity: entity)
                if text != last { line.show(text) }
                last = text
            }
            line.finish()
        }
        let objects: [DepotObject]
        do {
            objects = try await running.value
        } catch {
            drawer.cancel()
            throw describe(error, calling: StoreFetch.name)
        }
        await drawer.value
        return objects
    }
}

/// A grouped fetch's options (DESIGN.md §5): `depot fetch Team --group-by qualifyingZone --count --sum wins`.
///
/// Each aggregate is named after its function and key (`count`, `sum_wins`,
/// `max_team_wins` for `--max team.wins`): the names `--having` and `--sort` use.
struct GroupOptions: ParsableArguments {
    @Option(name: .customLong("group-by"), help: "A key path to group by; repeatable, in order.")
    var groupBy: [String] = []

    @Flag(help: "Count each group's objects (as 'count').")
    var count = false

    @Option(help: "Sum a numeric key per group (as 'sum_KEY'); repeatable.")
    var sum: [String] = []

    @Option(help: "Average a numeric key per group (as 'avg_KEY'); repeatable.")
    var avg: [String] = []

    @Option(help: "The least value of a key per group (as 'min_KEY'); repeatable.")
    var min: [String] = []

    @Option(help: "The greatest value of a key per group (as 'max_KEY'); repeatable.")
    var max: [String] = []

    @Option(help: "A predicate over the groupBy keys and aggregate names that a group must pass, e.g. 'count > 3'.")
    var having: String?

    /// Whether any grouping option was given.
    var isGrouped: Bool {
        !groupBy.isEmpty || count || !sum.isEmpty || !avg.isEmpty || !min.isEmpty || !max.isEmpty || having != nil
    }

    /// The aggregates, in the order count, sum, avg, min, max.
    var aggregates: [ExpressionDescription] {
        var aggregates = count ? [ExpressionDescription(name: "count", function: .count)] : []
        for (function, keys) in [(AggregateFunction.sum, sum), (.avg, avg), (.min, min), (.max, max)] {
            for key in keys {
                let name = "\(function.rawValue)_" + key.replacingOccurrences(of: ".", with: "_")
                aggregates.append(ExpressionDescription(name: name, function: function, key: key))
            }
        }
        return aggregates
    }

    /// `request` made grouped by these options.
    func apply(to request: FetchRequest) -> FetchRequest {
        var request = request
        request.groupBy = groupBy.isEmpty ? nil : groupBy
        request.aggregates = aggregates.isEmpty ? nil : aggregates
        request.having = having
        return request
    }
}

/// `depot fetch ENTITY`: a fetch printed as a table (or JSON).
struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fetch objects and print them as a table (store/fetch).",
        discussion: """
            Examples:
              depot fetch Team --predicate 'wins > 2' --sort wins:desc --sort teamName --limit 5
              depot fetch Team --predicate 'qualifyingZone == %@' --arguments '["Europe"]' --columns teamName,wins
              depot fetch Team --json | jq '.[].teamName'
              depot fetch Match --prefetch homeTeam --column round --column homeTeam.teamName --column awayTeam.teamName
              depot fetch Team --group-by qualifyingZone --count --sum wins --sort sum_wins:desc --having 'count > 4'
            --json prints one JSON array of the objects ({"id", "entity", "version", ...values}), or of the
            groups' dictionaries for a grouped fetch.
            """)

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var options: FetchOptions
    @OptionGroup(title: "Grouping") var grouping: GroupOptions

    @Option(help: "Comma-separated keys to show (default: every key but id, entity and version).")
    var columns: String?

    @Option(
        help:
            "A key to show, possibly through relationships (homeTeam.teamName: the relationship is prefetched); repeatable."
    )
    var column: [String] = []

    @Option(help: "A relationship key path whose objects come with the rows (homeTeam, homeTeam.coach); repeatable.")
    var prefetch: [String] = []

    @Flag(help: "Print the objects as one JSON array (with --prefetch: {\"objects\": [...], \"related\": {...}}).")
    var json = false

    func run() async throws {
        _ = try options.request()  // Bad --sort or --arguments: say so before connecting.
        let client = try await connection.connect()
        defer { client.abort() }
        if grouping.isGrouped {
            try await runGrouped(client)
            return
        }
        if !prefetch.isEmpty || !RelatedColumns.prefetchPaths(for: column).isEmpty {
            try await runPrefetched(client)
            return
        }
        let objects = try await options.fetch(client)
        if json {
            print(jsonLine(.array(objects.map(\.json))))
            return
        }
        let named =
            (columns.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []) + column
        let keys = named.isEmpty ? Array(Set(objects.flatMap(\.values.keys))).sorted() : named
        print(textTable(objects, keys: keys))
        printError("\(objects.count) \(objects.count == 1 ? "object" : "objects")")
    }
}

extension Fetch {
    /// A fetch with `prefetch` (DESIGN.md §5): the rows and their related objects, in
    /// one answer; columns may read through relationships (`homeTeam.teamName`).
    private func runPrefetched(_ client: DepotConnection) async throws {
        var request = try options.request()
        let named =
            (columns.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []) + column
        var paths = prefetch
        for path in RelatedColumns.prefetchPaths(for: named)
        where !paths.contains(where: { $0.utf8.elementsEqual(path.utf8) }) {
            paths.append(path)
        }
        request.prefetch = paths
        request.batchSize = nil
        let result: StoreFetch.Result
        do {
            result = try await client.call(StoreFetch.self, request)
        } catch {
            throw describe(error, calling: StoreFetch.name)
        }
        let objects = result.objects ?? []
        let related = result.related ?? [:]
        if json {
            print(jsonLine(["objects": .array(objects), "related": .object(related)]))
            return
        }
        let keys =
            named.isEmpty
            ? Array(
                Set(objects.flatMap { $0.objectValue?.keys.map { $0 } ?? [] }).subtracting(["id", "entity", "version"])
            )
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } : named
        print(
            textTable(
                header: ["id"] + keys,
                rows: objects.map { object in
                    [object["id"] ?? .null] + keys.map { RelatedColumns.value($0, of: object, related: related) }
                }))
        printError(
            "\(objects.count) \(objects.count == 1 ? "object" : "objects"), \(related.count) related \(related.count == 1 ? "object" : "objects")"
        )
    }

    /// A grouped fetch: one row per group, its groupBy keys then its aggregates.
    private func runGrouped(_ client: DepotConnection) async throws {
        let request = grouping.apply(to: try options.request())
        let groups: [JSONValue]
        do {
            groups = try await client.call(StoreFetch.self, request).objects ?? []
        } catch {
            throw describe(error, calling: StoreFetch.name)
        }
        if json {
            print(jsonLine(.array(groups)))
            return
        }
        let keys =
            columns.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
            ?? grouping.groupBy + grouping.aggregates.map(\.name)
        print(textTable(header: keys, rows: groups.map { group in keys.map { group[$0] ?? .null } }))
        printError("\(groups.count) \(groups.count == 1 ? "group" : "groups")")
    }
}

/// `depot export ENTITY`: JSON Lines, one object's values per line, for `depot import`.
struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write objects as JSON Lines (one object per line) on standard output, for depot import.",
        discussion: """
            Each line holds an object's values (attributes, and to-one relationships as ids); --with-ids adds
            "id", "entity" and "version". It pairs with import, which reads JSON Lines files and standard input:
              depot export Team > teams.jsonl
              depot import teams.jsonl --entity Team --identity teamName
              depot export Team --predicate 'wins > 2' | depot import - --entity Team --identity teamName --connect EP
            """)

    @OptionGroup var connection: ConnectionOptions
    @OptionGroup var options: FetchOptions

    @Flag(name: .customLong("with-ids"), help: "Also write each object's id, entity and version.")
    var withIDs = false

    func run() async throws {
        _ = try options.request()
        let client = try await connection.connect()
        defer { client.abort() }
        let objects = try await options.fetch(client)
        var output = Data()
        for object in objects {
            output.append(contentsOf: JSONWriter.encode(withIDs ? object.json : .object(object.values)))
            output.append(UInt8(ascii: "\n"))
            if output.count > 1 << 20 {
                FileHandle.standardOutput.write(output)
                output.removeAll(keepingCapacity: true)
            }
        }
        FileHandle.standardOutput.write(output)
        printError("exported \(objects.count) \(options.entity) \(objects.count == 1 ? "object" : "objects")")
    }
}

/// Reads `--sort` values: `key`, `key:asc` or `key:desc`.
func parseSortKeys(_ keys: [String]) throws -> [DepotProtocol.SortDescriptor]? {
    guard !keys.isEmpty else { return nil }
    return try keys.map { text in
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard let key = parts.first, !key.isEmpty, parts.count <= 2 else {
            throw CLIError("bad --sort '\(text)': use key, key:asc or key:desc")
        }
        let direction = parts.count == 2 ? String(parts[1]).lowercased() : "asc"
        guard direction == "asc" || direction == "desc" else {
            throw CLIError("bad --sort '\(text)': the direction must be asc or desc, got '\(parts[1])'")
        }
        return DepotProtocol.SortDescriptor(key: String(key), ascending: direction == "asc")
    }
}

/// `Team ▕██████░░░░░░▏ 6000/10000 (60%)`.
func progressBar(_ update: FetchProgress, entity: String, width: Int = 30) -> String {
    guard let total = update.total, total > 0, let fraction = update.fractionCompleted else {
        return "fetching \(entity): \(update.completed) objects"
    }
    let filled = Int((fraction * Double(width)).rounded(.down))
    let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
    return "fetching \(entity) ▕\(bar)▏ \(update.completed)/\(total) (\(Int(fraction * 100))%)"
}

/// Objects as an aligned text table: `id` and `keys`, one row per object.
func textTable(_ objects: [DepotObject], keys: [String], maxWidth: Int = 40) -> String {
    textTable(
        header: ["id"] + keys,
        rows: objects.map { object in [.string(object.id)] + keys.map { object.value(forKey: $0) ?? .null } },
        maxWidth: maxWidth)
}

/// Values as an aligned text table under `header` (nil shows as an empty cell).
func textTable(header: [String], rows values: [[JSONValue]], maxWidth: Int = 40) -> String {
    func cell(_ value: JSONValue) -> String {
        let text: String
        switch value {
        case .null: text = ""
        case .string(let string): text = string
        case let other: text = jsonLine(other)
        }
        return text.count > maxWidth ? String(text.prefix(maxWidth - 1)) + "…" : text
    }
    let rows = values.map { $0.map(cell) }
    var widths = header.map(\.count)
    for row in rows {
        for (column, text) in row.enumerated() { widths[column] = max(widths[column], text.count) }
    }
    func line(_ cells: [String]) -> String {
        zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
            .replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression)
    }
    return ([line(header), line(widths.map { String(repeating: "-", count: $0) })] + rows.map(line))
        .joined(separator: "\n")
}
