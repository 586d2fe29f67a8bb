import DepotClient
import DepotProtocol
import Foundation

/// One import in progress: reads pages, checks rows, sends batches, counts.
struct ImportRun {
    let entity: String
    let batchSize: Int
    let stopOnError: Bool
    let client: DepotConnection
    let control: ImportControl
    var summary = ImportSummary()
    var progress = ProgressLine()
    private var batch: [(values: [String: JSONValue], page: Int, index: Int)] = []
    private let started = ContinuousClock.now

    init(entity: String, batchSize: Int, stopOnError: Bool, client: DepotConnection, control: ImportControl) {
        self.entity = entity
        self.batchSize = batchSize
        self.stopOnError = stopOnError
        self.client = client
        self.control = control
    }

    private var done: Bool { summary.stopped || summary.interrupted }

    /// Reads every page and imports its rows.
    mutating func perform(pages: PageSource, mapping: ImportMapping) async {
        var number = 1
        summary.pageCount = 1
        while number <= summary.pageCount && !done {
            if control.interrupted {
                summary.interrupted = true
                break
            }
            do {
                let (rows, count) = try await pages.load(page: number)
                if number == 1, let count, !pages.isSinglePage { summary.pageCount = max(1, count) }
                summary.pagesRead += 1
                for (index, row) in rows.enumerated() {
                    summary.rowsRead += 1
                    switch mapping.values(for: row) {
                    case .success(let values): batch.append((values, number, index))
                    case .failure(let problem): report(page: number, index: index, problem.reason)
                    }
                    if done { break }
                    if batch.count >= batchSize { await flush() }
                    if done { break }
                }
            } catch {
                if case .missing = error { summary.missingPages.append(number) }
                report(page: number, index: nil, error.description)
                if number == 1 && !pages.isSinglePage, case .missing = error { summary.pageCount = 1 }
            }
            showProgress(page: number)
            number += 1
        }
        if !done {
            await flush()
            showProgress(page: min(number - 1, summary.pageCount))
        }
        if control.interrupted { summary.interrupted = true }
        let elapsed = ContinuousClock.now - started
        summary.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    private mutating func report(page: Int, index: Int?, _ message: String) {
        summary.problems.append(.init(page: page, index: index, message: message))
        if stopOnError { summary.stopped = true }
    }

    /// Sends the pending rows as one batch (one transaction).
    private mutating func flush() async {
        guard !batch.isEmpty, !done else { return }
        let rows = batch
        batch = []
        let first = rows.first!, last = rows.last!
        let range =
            first.page == last.page
            ? "page \(first.page) rows \(first.index)–\(last.index)"
            : "page \(first.page) row \(first.index) to page \(last.page) row \(last.index)"
        do {
            if summary.usedSaveFallback {
                try await saveFallback(rows.map(\.values))
            } else {
                try await batchInsert(rows.map(\.values))
            }
            summary.batches += 1
        } catch let error as DepotClientError {
            if error.rpcError?.code == .methodNotFound && !summary.usedSaveFallback {
                summary.usedSaveFallback = true
                batch = rows
                return await flush()
            }
            if error.rpcError?.code == .requestCancelled || control.interrupted {
                summary.interrupted = true
                summary.problems.append(
                    .init(page: first.page, index: nil, message: "batch of \(range) cancelled and rolled back"))
                return
            }
            let detail = error.rpcError.map { "\($0.message) (\($0.code.rawValue))" } ?? "\(error)"
            report(page: first.page, index: first.index, "batch of \(rows.count) (\(range)) not committed: \(detail)")
        } catch {
            report(page: first.page, index: first.index, "batch (\(range)) not committed: \(error)")
        }
    }

    private mutating func batchInsert(_ objects: [[String: JSONValue]]) async throws {
        let id = client.makeRequestID()
        control.setInFlight(id)
        defer { control.setInFlight(nil) }
        if control.interrupted { throw DepotClientError.server(.cancelled) }
        let params = BatchInsert.Parameters(
            entity: entity, objects: objects, onConflict: .update, author: "depot import", workDoneToken: nil)
        let result = try await client.call(
            id: id, method: BatchInsert.name, params: try JSONCoding.encode(params), timeout: .seconds(600))
        let counts = try JSONCoding.decode(BatchInsert.Result.self, from: result)
        summary.inserted += counts.inserted
        summary.updated += counts.updated
        summary.ignored += counts.ignored
        summary.unchanged += max(0, objects.count - counts.inserted - counts.updated - counts.ignored)
    }

    /// Until store/batchInsert lands: the same find-or-create through one store/save under objectTrump.
    private mutating func saveFallback(_ objects: [[String: JSONValue]]) async throws {
        let id = client.makeRequestID()
        control.setInFlight(id)
        defer { control.setInFlight(nil) }
        if control.interrupted { throw DepotClientError.server(.cancelled) }
        let params = StoreSave.Parameters(
            inserted: objects.enumerated().map {
                InsertedObject(entity: entity, tempId: "row\($0.offset)", values: $0.element)
            },
            mergePolicy: .objectTrump, author: "depot import")
        let result = try await client.call(
            id: id, method: StoreSave.name, params: try JSONCoding.encode(params), timeout: .seconds(600))
        let saved = try JSONCoding.decode(StoreSave.Result.self, from: result)
        let inserted = saved.versions.values.filter { $0 == 1 }.count
        let updated = saved.versions.count - inserted
        summary.inserted += inserted
        summary.updated += updated
        summary.unchanged += objects.count - inserted - updated
    }

    private mutating func showProgress(page: Int) {
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let written = summary.inserted + summary.updated + summary.unchanged + summary.ignored
        let rate = seconds > 0 ? Double(written) / seconds : 0
        progress.show(
            "page \(page)/\(summary.pageCount) · \(summary.rowsRead) rows read · \(written) written (\(summary.inserted) new, \(summary.updated) updated) · \(Int(rate)) objects/s"
        )
    }
}

/// A progress line on standard error: rewritten in place on a terminal, one line per update otherwise.
struct ProgressLine {
    /// Whether standard error is a terminal.
    let isTerminal = isatty(STDERR_FILENO) == 1
    private var shown = false

    mutating func show(_ text: String) {
        FileHandle.standardError.write(Data((isTerminal ? "\r\u{1B}[2K" + text : text + "\n").utf8))
        shown = true
    }

    mutating func finish() {
        if isTerminal && shown { FileHandle.standardError.write(Data("\n".utf8)) }
        shown = false
    }
}
