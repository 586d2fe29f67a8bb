import DepotClient
import DepotProtocol
import Foundation
import XCTest

/// A client-side copy of fetched results that applies `results/didChange`
/// exactly as DESIGN.md §7 prescribes: the delta oracle. After every
/// notification, ``assertMatchesFreshFetch`` compares it with a new `store/fetch`.
struct ResultsMirror {
    var sections: [(name: String, objects: [JSONValue])]
    var seq: Int64
    let request: FetchRequest
    let sectionKeyPath: String?
    let subscription: String

    /// Starts from a subscription made with `include: all`.
    init(_ result: ResultsSubscribe.Result, request: FetchRequest, sectionKeyPath: String?) {
        self.request = request
        self.sectionKeyPath = sectionKeyPath
        subscription = result.subscription
        seq = result.seq
        var objects = result.objects[...]
        sections = result.sections.map { info in
            let slice = objects.prefix(info.count)
            objects = objects.dropFirst(info.count)
            return (info.name, Array(slice))
        }
    }

    /// Applies one notification by the §7 rule.
    mutating func apply(_ change: ResultsDidChange.Parameters, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(change.seq, seq + 1, "seq grows by exactly one", file: file, line: line)
        seq = change.seq
        let removals = change.objects.filter { $0.type == .delete || $0.type == .move }
            .compactMap(\.indexPath).sorted { $0.lexicographicallyPrecedes($1) }.reversed()
        for path in removals {
            guard path.count == 2, sections.indices.contains(path[0]),
                sections[path[0]].objects.indices.contains(path[1])
            else {
                return XCTFail("old index path \(path) out of range", file: file, line: line)
            }
            sections[path[0]].objects.remove(at: path[1])
        }
        for section in change.sections.filter({ $0.type == .delete }).sorted(by: { $0.index > $1.index }) {
            guard sections.indices.contains(section.index) else {
                return XCTFail("section \(section.index) out of range", file: file, line: line)
            }
            XCTAssertEqual(
                Array(sections[section.index].name.utf8), Array(section.name.utf8), file: file, line: line)
            XCTAssertTrue(sections[section.index].objects.isEmpty, "a deleted section is empty", file: file, line: line)
            sections.remove(at: section.index)
        }
        for section in change.sections.filter({ $0.type == .insert }).sorted(by: { $0.index < $1.index }) {
            guard section.index <= sections.count else {
                return XCTFail("section insert \(section.index) out of range", file: file, line: line)
            }
            sections.insert((section.name, []), at: section.index)
        }
        let insertions = change.objects.filter { $0.type == .insert || $0.type == .move }
            .sorted { ($0.newIndexPath ?? []).lexicographicallyPrecedes($1.newIndexPath ?? []) }
        for insertion in insertions {
            guard let path = insertion.newIndexPath, path.count == 2, sections.indices.contains(path[0]),
                path[1] <= sections[path[0]].objects.count, let object = insertion.object
            else {
                return XCTFail("new index path \(insertion.newIndexPath ?? []) out of range", file: file, line: line)
            }
            sections[path[0]].objects.insert(object, at: path[1])
        }
        for update in change.objects where update.type == .update || update.type == .move {
            guard let path = update.newIndexPath, sections.indices.contains(path[0]),
                sections[path[0]].objects.indices.contains(path[1]),
                let object = update.object
            else { return XCTFail("update path \(update.newIndexPath ?? []) out of range", file: file, line: line) }
            XCTAssertEqual(
                sections[path[0]].objects[path[1]]["id"], object["id"], "update at the right place", file: file,
                line: line)
            sections[path[0]].objects[path[1]] = object
        }
    }

    /// The fresh fetch grouped the way the subscription sections it.
    func freshSections(_ client: DepotConnection) async throws -> [(name: String, objects: [JSONValue])] {
        let objects = try await client.call(StoreFetch.self, request).objects ?? []
        guard let sectionKeyPath else { return [("", objects)] }
        var grouped: [(name: String, objects: [JSONValue])] = []
        let path = sectionKeyPath.split(separator: ".").map(String.init)
        var related: [String: JSONValue] = [:]
        for object in objects {
            // Follow to-one relationships for a key path such as country.name.
            var value = object
            for component in path.dropLast() {
                guard let id = value[component]?.stringValue else {
                    value = .null
                    break
                }
                if related[id] == nil {
                    related[id] = try await client.call(StoreGet.self, .init(ids: [id])).objects.first ?? .null
                }
                value = related[id] ?? .null
            }
            value = value[path.last ?? sectionKeyPath] ?? .null
            let name: String
            switch value {
            case .null: name = ""
            case .string(let text): name = text
            case .int(let number): name = String(number)
            default: name = value.excerpt()
            }
            if grouped.last?.name.bytesEqual(name) == true {
                grouped[grouped.count - 1].objects.append(object)
            } else {
                grouped.append((name, [object]))
            }
        }
        return grouped
    }

    /// Whether the mirror equals a fresh fetch.
    func matchesFreshFetch(_ client: DepotConnection) async throws -> Bool {
        let fresh = try await freshSections(client)
        // Names by bytes (DESIGN.md §4): Swift's `String ==` would take two spellings for one.
        return sections.map { Array($0.name.utf8) } == fresh.map { Array($0.name.utf8) }
            && sections.map(\.objects) == fresh.map(\.objects)
    }

    /// Asserts that the mirror equals a fresh fetch, section by section.
    func assertMatchesFreshFetch(_ client: DepotConnection, file: StaticString = #filePath, line: UInt = #line)
        async throws
    {
        let fresh = try await freshSections(client)
        XCTAssertEqual(
            sections.map { Array($0.name.utf8) }, fresh.map { Array($0.name.utf8) }, "section names", file: file,
            line: line)
        XCTAssertEqual(sections.map(\.objects), fresh.map(\.objects), "objects", file: file, line: line)
    }
}

/// Collects a connection's notifications in the background, so tests can
/// wait for a particular one with a timeout.
final class ChangeCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var received: [ServerNotification] = []
    private var task: Task<Void, Never>?

    init(_ connection: DepotConnection) {
        let stream = connection.notifications()
        task = Task { [weak self] in
            for await note in stream {
                guard let self else { return }
                self.lock.withLock { self.received.append(note) }
            }
        }
    }

    deinit { task?.cancel() }

    /// Takes the first received notification matching `predicate`, waiting at most `timeout`.
    func take(timeout: Duration = .seconds(10), where predicate: (ServerNotification) -> Bool) async
        -> ServerNotification?
    {
        let deadline = ContinuousClock.now + timeout
        while true {
            let found = lock.withLock { () -> ServerNotification? in
                guard let index = received.firstIndex(where: predicate) else { return nil }
                return received.remove(at: index)
            }
            if let found { return found }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// The next didChange for `subscription`, waiting at most `timeout`.
    func next(for subscription: String, timeout: Duration = .seconds(10)) async -> ResultsDidChange.Parameters? {
        await take(timeout: timeout) { $0.decode(ResultsDidChange.self)?.subscription == subscription }?.decode(
            ResultsDidChange.self)
    }

    /// The next didChange for `subscription`, failing the test when none comes.
    func expect(
        for subscription: String, timeout: Duration = .seconds(10), file: StaticString = #filePath, line: UInt = #line
    ) async throws -> ResultsDidChange.Parameters {
        guard let change = await next(for: subscription, timeout: timeout) else {
            XCTFail("no results/didChange for \(subscription) within \(timeout)", file: file, line: line)
            throw CancellationError()
        }
        return change
    }

    /// Takes every notification received so far.
    /// Takes every notification received so far, once one matching `last` has
    /// arrived: the client yields notifications to this collector's task
    /// asynchronously, so a response can be read before the notifications that
    /// preceded it on the wire are collected.
    func drain(
        through last: (ServerNotification) -> Bool, timeout: Duration = .seconds(10)
    ) async -> [ServerNotification] {
        let deadline = ContinuousClock.now + timeout
        while !lock.withLock({ received.contains(where: last) }) && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        return drain()
    }

    func drain() -> [ServerNotification] {
        lock.withLock {
            defer { received.removeAll() }
            return received
        }
    }
}
