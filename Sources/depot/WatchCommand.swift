import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

/// `depot watch ENTITY`: a live, sectioned table of a fetch request, with each delta as it arrives.
struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Subscribe to a fetch request and show its live results and each change (results/subscribe).",
        discussion: """
            Examples:
              depot watch Team --sort qualifyingZone --sort wins:desc --section qualifyingZone
              depot watch Team --predicate 'wins > 2' --sort teamName --json
              depot watch Team --group-by qualifyingZone --count --sum wins --sort sum_wins:desc --limit 3
              depot watch Match --sort kickoff --columns round,homeTeam.teamName,awayTeam.teamName
            With grouping options (as depot fetch's) the rows are the groups, each with the id
            group:[<groupBy values>], kept live as objects move between them.
            With --json every event is one line on standard output:
              {"event": "snapshot", "subscription", "seq", "transaction", "sections": [{"name", "objects": [...]}]}
              {"event": "change", "seq", "transaction", "sections": [...], "objects": [...]}   (results/didChange)
              {"event": "reload", ...snapshot fields, "resumed"?}   (after a gap, results/didInvalidate or a new session)
            On a new session (a daemon restart, a dropped link) watch subscribes again with resume:
            only the rows that changed meanwhile are sent (results/subscribe resume, DESIGN.md §7).
            Stop with Ctrl-C.
            """)

    @OptionGroup var connection: ConnectionOptions

    @Argument(help: "The entity to watch.")
    var entity: String

    @Option(help: "An NSPredicate-format filter.")
    var predicate: String?

    @Option(help: "The predicate's arguments as JSON (an object for $variables, an array for %@).")
    var arguments: String?

    @Option(help: "A sort key, key or key:desc; repeatable, in order. At least one is required.")
    var sort: [String] = []

    @Option(help: "The key path naming each object's section; must order like the first sort key.")
    var section: String?

    @Option(help: "Keep a live window of at most this many rows (a live top ten: --limit 10).")
    var limit: Int?

    @Option(help: "The window starts after this many rows.")
    var offset: Int?

    @Option(help: "Comma-separated keys to show (default: every key but id, entity and version).")
    var columns: String?

    @Option(
        help:
            "A relationship key path whose objects are kept live beside the rows (homeTeam); repeatable. Dotted --columns (homeTeam.teamName) prefetch their relationship."
    )
    var prefetch: [String] = []

    @Option(help: "Exit after this many changes (for scripts).")
    var maxChanges: Int?

    @Flag(help: "One JSON line per event instead of tables.")
    var json = false

    @OptionGroup(title: "Grouping") var grouping: GroupOptions

    func validate() throws {
        // Groups are ordered by their groupBy keys when no sort is given.
        guard !sort.isEmpty || grouping.isGrouped else {
            throw ValidationError("watch needs at least one --sort key (fetched results are ordered)")
        }
    }

    /// The grouped request (its groupBy keys name each group's id), or `nil` without grouping options.
    private var groupedRequest: FetchRequest? {
        grouping.isGrouped ? grouping.apply(to: FetchRequest(entity: entity)) : nil
    }

    /// A row's id, as the daemon sends it: the object's, or the group's (`group:` + its groupBy values).
    private func id(of row: JSONValue) -> String? { row["id"]?.stringValue }

    func run() async throws {
        var request: [String: JSONValue] = ["entity": .string(entity), "sort": .array(try sortDescriptors())]
        if let groupedRequest {
            if let groupBy = groupedRequest.groupBy { request["groupBy"] = .array(groupBy.map { .string($0) }) }
            if let aggregates = groupedRequest.aggregates { request["aggregates"] = try JSONCoding.encode(aggregates) }
            if let having = groupedRequest.having { request["having"] = .string(having) }
        }
        if let predicate { request["predicate"] = .string(predicate) }
        if let limit { request["limit"] = .int(Int64(limit)) }
        if let offset { request["offset"] = .int(Int64(offset)) }
        if let arguments { request["arguments"] = try parseJSONArgument(arguments, what: "--arguments") }
        var paths = prefetch
        for path in RelatedColumns.prefetchPaths(for: columns?.split(separator: ",").map(String.init) ?? [])
        where !paths.contains(where: { $0.utf8.elementsEqual(path.utf8) }) {
            paths.append(path)
        }
        if !paths.isEmpty { request["prefetch"] = .array(paths.map { .string($0) }) }
        var params: [String: JSONValue] = ["request": .object(request), "include": "all"]
        if let section { params["sectionKeyPath"] = .string(section) }

        let client = try await connection.connect()
        defer { client.abort() }
        let notifications = client.notifications()
        let subscribed: ResultsSubscribe.Result
        do {
            let result = try await client.call(method: ResultsSubscribe.name, params: .object(params))
            subscribed = try JSONCoding.decode(ResultsSubscribe.Result.self, from: result)
        } catch let error as DepotClientError {
            if error.rpcError?.code == .methodNotFound {
                throw CLIError(
                    "this depotd does not serve results/subscribe (live fetched results) yet, so there is nothing to watch. "
                        + "`depot call store/observe` and `depot call store/fetch` work meanwhile.")
            }
            throw describe(error, calling: ResultsSubscribe.name)
        }
        var table = try ResultsTable(
            sections: subscribed.sections, ids: subscribed.objects.compactMap { id(of: $0) },
            objects: Dictionary(
                subscribed.objects.compactMap { o in id(of: o).map { ($0, o) } }, uniquingKeysWith: { a, _ in a }),
            seq: subscribed.seq, related: subscribed.related ?? [:])
        var transaction = subscribed.transaction
        emitSnapshot("snapshot", table, subscription: subscribed.subscription, transaction: transaction)

        var subscription = subscribed.subscription
        var changes = 0
        for await input in Self.inputs(client, notifications: notifications) {
            if maxChanges.map({ changes >= $0 }) ?? false { break }
            guard case .notification(let notification) = input else {
                // A new session (a daemon restart, a dropped link): resume from the table held.
                let resumed: Bool
                (table, transaction, subscription, resumed) = try await resume(
                    client, params: params, table: table, at: transaction)
                emitSnapshot("reload", table, subscription: subscription, transaction: transaction, resumed: resumed)
                continue
            }
            if let change = notification.decode(ResultsDidChange.self), change.subscription == subscription {
                if change.seq <= table.seq { continue }
                do throws(ResultsTable.Mismatch) {
                    guard change.seq == table.seq + 1 else { throw ResultsTable.Mismatch(description: "seq gap") }
                    try table.apply(change)
                    transaction = change.transaction
                    emitChange(change, table)
                } catch {
                    (table, transaction) = try await resync(client, subscription: subscription)
                    emitSnapshot("reload", table, subscription: subscription, transaction: transaction)
                }
                changes += 1
            } else if let invalidation = notification.decode(ResultsDidInvalidate.self),
                invalidation.subscription == subscription
            {
                guard invalidation.reason != "model" else {
                    throw CLIError(
                        "a migration renamed a key or entity the watched request names, which ended the subscription: watch again with the new names"
                    )
                }
                (table, transaction) = try await resync(client, subscription: subscription)
                emitSnapshot("reload", table, subscription: subscription, transaction: transaction)
            }
            if maxChanges.map({ changes >= $0 }) ?? false { break }
        }
    }

    /// What the watch loop hears: the session's notifications, and each new session.
    private enum Input: Sendable {
        case notification(ServerNotification)
        case reconnected
    }

    /// The notifications and new sessions of `client`, merged in arrival order.
    private static func inputs(_ client: DepotConnection, notifications: AsyncStream<ServerNotification>)
        -> AsyncStream<Input>
    {
        let (stream, continuation) = AsyncStream.makeStream(of: Input.self, bufferingPolicy: .unbounded)
        let events = client.connectionEvents()
        let forwarders = [
            Task {
                for await notification in notifications { continuation.yield(.notification(notification)) }
                continuation.finish()
            },
            Task {
                for await event in events { if case .reconnected = event { continuation.yield(.reconnected) } }
            },
        ]
        continuation.onTermination = { _ in forwarders.forEach { $0.cancel() } }
        return stream
    }

    /// Subscribes again on a new session with `resume` (DESIGN.md §7, Resuming): the table
    /// held as of `transaction` takes the rows the answer names; a full answer, or one whose
    /// rebuilt ids do not match its digest, is read in full from the new subscription.
    /// Returns the table, its transaction, the new subscription and whether it was resumed.
    private func resume(
        _ client: DepotConnection, params: [String: JSONValue], table: ResultsTable, at transaction: Int64
    )
        async throws -> (ResultsTable, Int64, String, Bool)
    {
        var params = params
        params["resume"] = ["transaction": .int(transaction), "digest": .string(ResultsDigest.of(table.ids))]
        let answer: ResultsSubscribe.Result
        do {
            answer = try await client.call(
                ResultsSubscribe.self, JSONCoding.decode(ResultsSubscribe.Parameters.self, from: .object(params)))
        } catch let error as DepotClientError {
            throw describe(error, calling: ResultsSubscribe.name)
        }
        var resumed = table
        if answer.resumed == true, (try? resumed.resume(with: answer, id: id(of:))) != nil {
            return (resumed, answer.transaction, answer.subscription, true)
        }
        let (full, at) = try await resync(client, subscription: answer.subscription)
        return (full, at, answer.subscription, false)
    }

    private func sortDescriptors() throws -> [JSONValue] {
        try sort.map { text in
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard let key = parts.first, !key.isEmpty, parts.count <= 2 else {
                throw CLIError("bad --sort '\(text)': use key or key:desc")
            }
            let direction = parts.count == 2 ? String(parts[1]).lowercased() : "asc"
            guard direction == "asc" || direction == "desc" else {
                throw CLIError("bad --sort '\(text)': the direction must be asc or desc")
            }
            return ["key": .string(String(key)), "ascending": .bool(direction == "asc")]
        }
    }

    private func resync(_ client: DepotConnection, subscription: String) async throws -> (ResultsTable, Int64) {
        do {
            let snapshot = try await client.call(ResultsSnapshot.self, .init(subscription: subscription))
            var objects: [String: JSONValue] = [:]
            var related: [String: JSONValue] = [:]
            var offset = 0
            while offset < snapshot.ids.count {
                let page = try await client.call(
                    ResultsObjects.self, .init(subscription: subscription, offset: offset, length: 500))
                related.merge(page.related ?? [:]) { _, new in new }
                for object in page.objects {
                    if let id = id(of: object) { objects[id] = object }
                }
                offset += 500
            }
            return (
                try ResultsTable(
                    sections: snapshot.sections, ids: snapshot.ids, objects: objects, seq: snapshot.seq,
                    related: related),
                snapshot.transaction
            )
        } catch let error as DepotClientError {
            throw describe(error, calling: "resync")
        }
    }

    // MARK: Output

    private func write(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    /// Prints the table; `resumed` says whether a reload on a new session was resumed (JSON only).
    private func emitSnapshot(
        _ event: String, _ table: ResultsTable, subscription: String, transaction: Int64, resumed: Bool? = nil
    ) {
        if json {
            let sections: [JSONValue] = table.sections.map { section in
                ["name": .string(section.name), "objects": .array(section.ids.map { table.values[$0] ?? .string($0) })]
            }
            var line: [String: JSONValue] = [
                "event": .string(event), "subscription": .string(subscription), "seq": .int(table.seq),
                "transaction": .int(transaction), "count": .int(Int64(table.count)), "sections": .array(sections),
            ]
            if !prefetch.isEmpty || !table.related.isEmpty { line["related"] = .object(table.related) }
            if let resumed { line["resumed"] = .bool(resumed) }
            write(jsonLine(.object(line)))
            return
        }
        write(
            event == "snapshot"
                ? "watching \(entity): \(table.count) \(grouping.isGrouped ? "groups" : "objects") (transaction \(transaction))"
                : resumed == true
                    ? "resumed on a new session (transaction \(transaction))"
                    : "reloaded after a gap (seq \(table.seq))")
        write(render(table))
    }

    private func emitChange(_ change: ResultsDidChange.Parameters, _ table: ResultsTable) {
        if json {
            var value = (try? JSONCoding.encode(change)) ?? .null
            if case .object(var members) = value {
                members["event"] = "change"
                value = .object(members)
            }
            write(jsonLine(value))
            return
        }
        var lines = ["— transaction \(change.transaction) (seq \(change.seq)):"]
        for section in change.sections {
            lines.append(
                "  section \(section.type.rawValue) [\(section.index)] \(section.name.isEmpty ? "(none)" : section.name)"
            )
        }
        for object in change.objects {
            let from = object.indexPath.map { "\($0)" } ?? ""
            let to = object.newIndexPath.map { "\($0)" } ?? ""
            let path = object.type == .insert ? to : object.type == .delete ? from : "\(from) -> \(to)"
            lines.append(
                "  \(object.type.rawValue) \(object.id) \(path)  \(object.object.map { cells($0, related: table.related) } ?? "")"
            )
        }
        write(lines.joined(separator: "\n"))
        write(render(table))
    }

    private func cells(_ object: JSONValue, related: [String: JSONValue]) -> String {
        let keys =
            columns?.split(separator: ",").map(String.init)
            ?? (object.objectValue?.keys.filter { !["id", "entity", "version"].contains($0) }.sorted() ?? [])
        return keys.map { key in
            let value = key.contains(".") ? RelatedColumns.value(key, of: object, related: related) : object[key]
            return "\(key)=\(value.map(jsonLine) ?? "-")"
        }.joined(separator: " ")
    }

    private func render(_ table: ResultsTable) -> String {
        var lines: [String] = []
        for (index, section) in table.sections.enumerated() {
            if self.section != nil || table.sections.count > 1 {
                lines.append("[\(index)] \(section.name.isEmpty ? "(none)" : section.name) — \(section.ids.count)")
            }
            for (row, id) in section.ids.enumerated() {
                lines.append("    \(row). \(id)  \(table.values[id].map { cells($0, related: table.related) } ?? "")")
            }
        }
        return lines.isEmpty ? "    (no objects)" : lines.joined(separator: "\n")
    }
}
