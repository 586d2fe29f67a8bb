import DepotProtocol
import DepotTestSupport
import Foundation
import GRDB
import XCTest

@testable import DepotStore

/// The typed path of `store/batchInsert` (``BatchRows/convertTyped(_:)``,
/// ``BatchRows/readTyped(_:)``) against the generic path: over random
/// homogeneous and heterogeneous batches (fixed seeds) of every attribute
/// type, nulls, defaults, to-one and to-many relationships and uniqueness
/// conflicts, sent plain, prepared and streamed, a store taking the typed
/// path and one taking only the generic path give the same result, the same
/// error and byte-identical rows.
final class TypedBatchInsertTests: XCTestCase {
    private static let model: [EntityDescription] = [
        EntityDescription(
            name: "Owner",
            attributes: [AttributeDescription(name: "code", type: .string)],
            relationships: [
                RelationshipDescription(name: "gadgets", destination: "Gadget", toMany: true, inverse: "owner")
            ],
            uniquenessConstraints: [["code"]]),
        EntityDescription(
            name: "Gadget",
            attributes: [
                AttributeDescription(name: "label", type: .string),
                AttributeDescription(name: "note", type: .string, optional: true, folded: true),
                AttributeDescription(name: "count", type: .integer, defaultValue: 7),
                AttributeDescription(name: "weight", type: .double, optional: true),
                AttributeDescription(name: "active", type: .boolean, optional: true, defaultValue: true),
                AttributeDescription(name: "madeAt", type: .date, optional: true),
                AttributeDescription(name: "token", type: .uuid, optional: true),
                AttributeDescription(name: "payload", type: .binary, optional: true),
                AttributeDescription(name: "extra", type: .json, optional: true),
                AttributeDescription(name: "serial", type: .integer, optional: true),
            ],
            relationships: [RelationshipDescription(name: "owner", destination: "Owner", inverse: "gadgets")],
            uniquenessConstraints: [["serial"]]),
    ]

    private static let gadgetKeys = [
        "label", "note", "count", "weight", "active", "madeAt", "token", "payload", "extra", "serial", "owner",
    ]

    /// How a batch reaches the store.
    private enum Route: CaseIterable { case plain, prepared, streamed }

    private var directories: [URL] = []

    override func tearDown() {
        for directory in directories { try? FileManager.default.removeItem(at: directory) }
        directories = []
        super.tearDown()
    }

    /// A store with the model, three owners and two gadgets; `typed` off makes it take only the generic path.
    private func makeStore(typed: Bool) throws -> Store {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-typed-batch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        directories.append(directory)
        let store = try Store(path: directory.appendingPathComponent("t.sqlite").path)
        _ = try store.defineModel(Self.model)
        store.typedBatchInsert.store(typed, ordering: .relaxed)
        _ = try store.batchInsert(
            BatchInsert.Parameters(entity: "Owner", objects: (1...3).map { ["code": .string("O\($0)")] }),
            writeScope: .unrestricted)
        _ = try store.batchInsert(
            BatchInsert.Parameters(
                entity: "Gadget",
                objects: [["label": "old 1", "serial": 1, "owner": "Owner/1"], ["label": "old 2", "serial": 2]]),
            writeScope: .unrestricted)
        return store
    }

    // MARK: Random values

    private func validValue(_ key: String, _ random: inout SeededGenerator) -> JSONValue {
        let pick = Int.random(in: 0..<8, using: &random)
        switch key {
        case "label", "note", "code":
            return .string(
                ["", "a", "Crème brûlée", "日本", "quote \" and \\ slash", String(repeating: "long ", count: 9)][pick % 6]
            )
        case "count": return pick == 0 ? .double(3) : .int(Int64.random(in: -1_000_000...1_000_000, using: &random))
        case "weight": return pick == 0 ? .int(5) : .double(Double(Int.random(in: -9999...9999, using: &random)) / 8)
        case "active": return .bool(pick % 2 == 0)
        case "madeAt":
            return .string(["2026-11-22T10:15:30.250Z", "2026-01-01T00:00:00Z", "1999-12-31T23:59:59.999Z"][pick % 3])
        case "token":
            let text = UUID(
                uuid: (
                    UInt8(pick), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                    UInt8.random(in: 0...255, using: &random)
                )
            ).uuidString
            return .string(pick % 2 == 0 ? text : text.lowercased())
        case "payload": return .string(["", "AAEC", Data("payload bytes".utf8).base64EncodedString()][pick % 3])
        case "extra": return [.object(["a": 1, "b": [true, .null]]), .array([1, "x"]), "text", 42][pick % 4]
        case "serial": return .int(Int64.random(in: 1...8, using: &random))
        case "owner": return .string("Owner/\(Int.random(in: 1...3, using: &random))")
        default: return .null
        }
    }

    /// A value the key may refuse (or take): a wrong type, a bad reference, null for a required key.
    private func oddValue(_ key: String, _ random: inout SeededGenerator) -> JSONValue {
        let candidates: [JSONValue] = [
            .null, 12, "twelve", 1.5, true, "2026-13-45", "not-a-uuid", "!!", "Owner/99", "Gadget/1",
            "nul \u{0} inside",
            .array([]),
        ]
        return candidates[Int.random(in: 0..<candidates.count, using: &random)]
    }

    private func randomObject(keys: [String], odd: Double, _ random: inout SeededGenerator) -> [String: JSONValue] {
        var object: [String: JSONValue] = [:]
        for key in keys {
            let roll = Double.random(in: 0..<1, using: &random)
            object[key] =
                roll < odd
                ? oddValue(key, &random) : roll < odd + 0.1 && key != "label" ? .null : validValue(key, &random)
        }
        if Double.random(in: 0..<1, using: &random) < odd / 4 {
            object[["nope", "gadgets", "id"][Int.random(in: 0..<3, using: &random)]] = 1
        }
        return object
    }

    private func randomKeys(_ random: inout SeededGenerator) -> [String] {
        // "label" (required, no default) is nearly always there; the rest at random.
        Self.gadgetKeys.filter { key in
            Double.random(in: 0..<1, using: &random) < (key == "label" ? 0.97 : 0.6)
        }
    }

    // MARK: Running and comparing

    private struct Outcome {
        var result: BatchInsert.Result?
        var changes: [String: EntityChanges]?
        var error: RPCError?
    }

    private static func rpcError(_ error: any Error) -> RPCError {
        error as? RPCError ?? RPCError(code: .internalError, message: "not an RPCError: \(error)")
    }

    private func run(_ params: BatchInsert.Parameters, on store: Store, route: Route) -> Outcome {
        do {
            let outcome: (BatchInsert.Result, CommittedTransaction?)
            switch route {
            case .plain: outcome = try store.batchInsert(params, writeScope: .unrestricted)
            case .prepared:
                outcome = try store.batchInsert(try store.prepareBatchInsert(params), writeScope: .unrestricted)
            case .streamed:
                let bytes = try JSONCoding.encodeBytes(params)
                outcome = try store.batchInsert(
                    try BatchInsert.StreamedParameters(bytes: bytes, range: 0..<bytes.count), writeScope: .unrestricted)
            }
            return Outcome(result: outcome.0, changes: outcome.1?.wireChanges)
        } catch {
            return Outcome(error: Self.rpcError(error))
        }
    }

    /// Every row of `entity`, each value with its storage class (1 and 1.0 differ).
    private func dump(_ store: Store, _ entity: String) throws -> [[String]] {
        let table = try XCTUnwrap(store.schema.entity(named: entity)).table
        return try store.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM \(table) ORDER BY id").map { row in
                row.columnNames.map { name in
                    let value: DatabaseValue = row[name]
                    switch value.storage {
                    case .null: return "\(name)=null"
                    case .int64(let number): return "\(name)=int \(number)"
                    case .double(let number): return "\(name)=real \(number.bitPattern)"
                    case .string(let text): return "\(name)=text \(Array(text.utf8))"
                    case .blob(let data): return "\(name)=blob \(Array(data))"
                    }
                }
            }
        }
    }

    private func assertSame(
        _ typed: Outcome, _ generic: Outcome, _ stores: (Store, Store), _ context: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        XCTAssertEqual(typed.result, generic.result, context, file: file, line: line)
        XCTAssertEqual(typed.changes, generic.changes, context, file: file, line: line)
        XCTAssertEqual(typed.error?.code, generic.error?.code, context, file: file, line: line)
        XCTAssertEqual(typed.error?.message, generic.error?.message, context, file: file, line: line)
        XCTAssertEqual(typed.error?.data, generic.error?.data, context, file: file, line: line)
        for entity in ["Owner", "Gadget"] {
            XCTAssertEqual(
                try dump(stores.0, entity), try dump(stores.1, entity), "\(context): \(entity) rows", file: file,
                line: line)
        }
    }

    // MARK: Tests

    func testRandomBatchesStoreTheSameRowsAndGiveTheSameErrorsOnEitherPath() throws {
        var random = SeededGenerator(seed: 28)
        var outcomes: [String: Int] = [:]
        for trial in 0..<36 {
            let typed = try makeStore(typed: true)
            let generic = try makeStore(typed: false)
            // A few batches per pair of stores, so later ones meet what earlier ones wrote.
            for step in 0..<3 {
                let homogeneous = Bool.random(using: &random)
                let odd = [0, 0, 0.01, 0.1][Int.random(in: 0..<4, using: &random)]
                let shared = randomKeys(&random)
                let count = Int.random(in: 1...60, using: &random)
                var objects = (0..<count).map { _ in
                    randomObject(keys: homogeneous ? shared : randomKeys(&random), odd: odd, &random)
                }
                var entity = "Gadget"
                if step == 2 && trial % 4 == 0 {
                    // Owners: a required string under a uniqueness constraint, and a to-many key now and then.
                    entity = "Owner"
                    objects = (0..<count).map { index in
                        var owner: [String: JSONValue] = ["code": .string("O\(Int.random(in: 1...9, using: &random))")]
                        if odd > 0 && index % 7 == 3 { owner["gadgets"] = ["Gadget/1"] }
                        return owner
                    }
                }
                let params = BatchInsert.Parameters(
                    entity: entity, objects: objects,
                    onConflict: ConflictResolution.allCases.randomElement(using: &random))
                let route = Route.allCases.randomElement(using: &random)!
                let context = "trial \(trial) step \(step) (\(route), \(homogeneous ? "homogeneous" : "heterogeneous"))"
                let first = run(params, on: typed, route: route)
                let second = run(params, on: generic, route: route)
                try assertSame(first, second, (typed, generic), context)
                outcomes[first.error.map { "error \($0.code.rawValue)" } ?? "ok", default: 0] += 1
            }
        }
        // The seed reaches successes and each kind of refusal.
        XCTAssertGreaterThan(outcomes["ok"] ?? 0, 20, "\(outcomes)")
        XCTAssertGreaterThan(outcomes["error \(ErrorCode.validationFailed.rawValue)"] ?? 0, 5, "\(outcomes)")
        XCTAssertGreaterThan(outcomes["error \(ErrorCode.uniqueConstraint.rawValue)"] ?? 0, 3, "\(outcomes)")
    }

    /// A valid homogeneous batch goes through the typed path whole; an object
    /// with a problem falls to the generic path, which reports it.
    func testAHomogeneousBatchTakesTheTypedPath() throws {
        let store = try makeStore(typed: true)
        let entity = try XCTUnwrap(store.schema.entity(named: "Gadget"))
        var random = SeededGenerator(seed: 6)
        let objects = (0..<100).map { _ in randomObject(keys: Self.gadgetKeys, odd: 0, &random) }
        XCTAssertEqual(BatchRows(entity: entity, objects: objects).typedCount, 100)
        var broken = objects
        broken[40]["count"] = "many"
        let rows = BatchRows(entity: entity, objects: broken)
        XCTAssertEqual(rows.typedCount, 99)
        XCTAssertEqual(rows.problemCount, 1)
        XCTAssertEqual(rows.problems.first?["object"], "objects[40]")
        XCTAssertEqual(BatchRows(entity: entity, objects: objects, typed: false).typedCount, 0)
    }

    /// Streamed objects written by hand: keys in another order per object, a
    /// repeated key (the last value wins, as the parser has it), escapes,
    /// and broken JSON reported the same way.
    func testStreamedObjectsReadMemberByMemberMatchTheParsedOnes() throws {
        let texts = [
            #"{"label":"a","count":1},{"count":2,"label":"b\u00e9"},{"label":"c","label":"d"},{"label":"e","owner":"Owner/2"}"#,
            #"{"label":"a"},{"label":"b","note":null,"weight":1e3,"active":false}"#,
            #"{"label":"a"},{"label":"b",}"#,
            #"{"label":"a"},7,{"label":"c"}"#,
            #"{"label":"a"},{"label":"b","count":"x","nope":1}"#,
        ]
        for text in texts {
            let typed = try makeStore(typed: true)
            let generic = try makeStore(typed: false)
            let bytes = Array(#"{"entity":"Gadget","objects":[\#(text)]}"#.utf8)
            var outcomes: [Outcome] = []
            for store in [typed, generic] {
                do {
                    let (result, transaction) = try store.batchInsert(
                        try BatchInsert.StreamedParameters(bytes: bytes, range: 0..<bytes.count),
                        writeScope: .unrestricted)
                    outcomes.append(Outcome(result: result, changes: transaction?.wireChanges))
                } catch {
                    outcomes.append(Outcome(error: Self.rpcError(error)))
                }
            }
            try assertSame(outcomes[0], outcomes[1], (typed, generic), text)
        }
        let store = try makeStore(typed: true)
        let bytes = Array(#"{"entity":"Gadget","objects":[{"label":"c","label":"d"}]}"#.utf8)
        _ = try store.batchInsert(
            try BatchInsert.StreamedParameters(bytes: bytes, range: 0..<bytes.count), writeScope: .unrestricted)
        let labels = try store.fetch(
            FetchRequest(entity: "Gadget", sort: [SortDescriptor(key: "label")]), scope: .unrestricted
        ).objects?
        .map { $0["label"] }
        XCTAssertEqual(labels, ["d", "old 1", "old 2"])
    }
}
