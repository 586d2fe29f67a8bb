import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation
import Synchronization

/// `depot import SOURCE`: find-or-create objects from paged JSON, in atomic batches.
struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import paged JSON ({\"number_of_pages\": N, \"result\": [...]}) with find-or-create, in batches.",
        discussion: """
            SOURCE is a page file, a directory of page-1.json … page-N.json, an URL template on loopback
            such as http://127.0.0.1:8000/page-{page}.json, or JSON Lines (one object per line, as depot export
            writes them): a .jsonl or .ndjson file, or - for standard input. Each batch is one store/batchInsert with
            onConflict "update" (one transaction: all of it commits or none of it). Rows with a missing identity
            field or a value of the wrong type, malformed and missing pages are reported with page and index,
            then skipped (--on-error skip, the default) or stop the import (--on-error stop). Ctrl-C cancels
            the batch in flight ($/cancelRequest; it rolls back) and stops.

            Example:
              depot import Tests/Fixtures/specs --entity Package --identity name,version \\
                --map name=name,version=release,downloads_a_month=downloads,summary=summary

            Exit status: 0 all imported, 1 stopped on an error, 2 finished with skipped input, 130 interrupted.
            """)

    /// What to do with bad input.
    enum OnError: String, ExpressibleByArgument, CaseIterable {
        case skip, stop
    }

    @OptionGroup var connection: ConnectionOptions

    @Argument(
        help: "A page file, a directory of page-N.json, an http://127.0.0.1:PORT/…{page}… template, a .jsonl file or -."
    )
    var source: String

    @Option(help: "The entity to import into.")
    var entity: String

    @Option(help: "Comma-separated source keys identifying a row; the entity needs a uniqueness constraint on them.")
    var identity: String

    @Option(help: "Comma-separated source=destination key renames; only mapped keys (and the identity) are imported.")
    var map: String?

    @Option(help: "Objects per batch (one transaction each).")
    var batchSize = 500

    @Option(help: "skip: report bad input and go on; stop: report it and stop.")
    var onError: OnError = .skip

    @Flag(help: "Print the summary as JSON on standard output.")
    var json = false

    func validate() throws {
        guard batchSize > 0 else { throw ValidationError("--batch-size must be positive, got \(batchSize)") }
    }

    func run() async throws {
        let pages = try PageSource(source)
        let client = try await connection.connect()
        defer { client.abort() }
        let model: ModelGet.Result
        do {
            model = try await client.call(ModelGet.self, Empty())
        } catch {
            throw describe(error, calling: ModelGet.name)
        }
        guard let description = model.entities.first(where: { $0.name == entity }) else {
            throw CLIError(
                "unknown entity '\(entity)' (the model has: \(model.entities.map(\.name).joined(separator: ", ")))")
        }
        let mapping = try ImportMapping(map: map, identity: identity, entity: description)
        let control = ImportControl(client: client)
        control.installInterruptHandler()
        defer { control.removeInterruptHandler() }
        var run = ImportRun(
            entity: entity, batchSize: batchSize, stopOnError: onError == .stop, client: client, control: control)
        await run.perform(pages: pages, mapping: mapping)
        run.progress.finish()
        print(json ? jsonLine(run.summary.json) : run.summary.text(entity: entity, source: pages.description))
        if run.summary.interrupted { throw ExitCode(130) }
        if run.summary.stopped { throw ExitCode(1) }
        if !run.summary.problems.isEmpty { throw ExitCode(2) }
    }
}

/// Ctrl-C handling: SIGINT sets a flag and cancels the request in flight.
///
/// `@unchecked`: `state` is behind a mutex; `signalSource` is only touched by the
/// importing task (install and remove), never by the signal handler.
final class ImportControl: @unchecked Sendable {
    private let client: DepotConnection
    private let state = Mutex<(interrupted: Bool, inFlight: RequestID?)>((false, nil))
    private var signalSource: DispatchSourceSignal?

    init(client: DepotConnection) { self.client = client }

    var interrupted: Bool { state.withLock { $0.interrupted } }

    func installInterruptHandler() {
        signal(SIGINT, SIG_IGN)
        let signalSource = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        signalSource.setEventHandler { [self] in
            let id = state.withLock { state -> RequestID? in
                state.interrupted = true
                return state.inFlight
            }
            printError("\ninterrupted: cancelling\(id == nil ? "" : " the batch in flight") …")
            if let id { client.cancel(id) }
        }
        signalSource.resume()
        self.signalSource = signalSource
    }

    func removeInterruptHandler() {
        signalSource?.cancel()
        signal(SIGINT, SIG_DFL)
    }

    /// Marks `id` as the request to cancel on Ctrl-C (or none).
    func setInFlight(_ id: RequestID?) { state.withLock { $0.inFlight = id } }
}

/// The counts and problems of one import.
struct ImportSummary {
    /// One bad input: a page, a row or a batch.
    struct Problem {
        var page: Int
        var index: Int?
        var message: String
    }

    var pageCount = 0
    var pagesRead = 0
    var missingPages: [Int] = []
    var rowsRead = 0
    var inserted = 0
    var updated = 0
    var ignored = 0
    var unchanged = 0
    var batches = 0
    var problems: [Problem] = []
    var stopped = false
    var interrupted = false
    var usedSaveFallback = false
    var seconds = 0.0

    var json: JSONValue {
        [
            "pages": .int(Int64(pageCount)), "pagesRead": .int(Int64(pagesRead)),
            "missingPages": .array(missingPages.map { .int(Int64($0)) }),
            "rows": .int(Int64(rowsRead)), "inserted": .int(Int64(inserted)), "updated": .int(Int64(updated)),
            "ignored": .int(Int64(ignored)), "unchanged": .int(Int64(unchanged)), "batches": .int(Int64(batches)),
            "skipped": .int(Int64(problems.count)), "stopped": .bool(stopped), "interrupted": .bool(interrupted),
            "method": .string(usedSaveFallback ? StoreSave.name : BatchInsert.name),
            "seconds": .double((seconds * 1000).rounded() / 1000),
            "problems": .array(
                problems.map { problem in
                    var members: [String: JSONValue] = [
                        "page": .int(Int64(problem.page)), "message": .string(problem.message),
                    ]
                    if let index = problem.index { members["index"] = .int(Int64(index)) }
                    return .object(members)
                }),
        ]
    }

    func text(entity: String, source: String) -> String {
        var lines: [String] = []
        let how = interrupted ? "interrupted" : stopped ? "stopped on an error" : "done"
        lines.append(
            "import \(how): \(pagesRead) of \(pageCount) page\(pageCount == 1 ? "" : "s"), \(rowsRead) rows from \(source) into \(entity) in \(String(format: "%.1f", seconds))s"
        )
        lines.append(
            "  \(inserted) inserted, \(updated) updated, \(unchanged) unchanged, \(ignored) ignored in \(batches) batch\(batches == 1 ? "" : "es")"
        )
        if usedSaveFallback {
            lines.append(
                "  (this depotd has no store/batchInsert yet: batches went through store/save with mergePolicy objectTrump)"
            )
        }
        if !missingPages.isEmpty {
            lines.append("  missing pages: \(missingPages.map(String.init).joined(separator: ", "))")
        }
        if !problems.isEmpty {
            lines.append(
                "  \(problems.count) problem\(problems.count == 1 ? "" : "s") (skipped\(stopped ? ", then stopped" : "")):"
            )
            for problem in problems.prefix(20) {
                lines.append(
                    "    page \(problem.page)\(problem.index.map { " index \($0)" } ?? ""): \(problem.message)")
            }
            if problems.count > 20 { lines.append("    … and \(problems.count - 20) more (use --json for all)") }
        }
        return lines.joined(separator: "\n")
    }
}
