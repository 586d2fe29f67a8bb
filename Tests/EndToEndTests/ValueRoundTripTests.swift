import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Every attribute type reads back exactly as it was saved (DESIGN.md §4):
/// save → fetch → save the fetched values → fetch, and through
/// `results/didChange`, on random values chosen to break lossy conversions.
final class ValueRoundTripTests: XCTestCase {
    static let entity = EntityDescription(
        name: "Sample",
        attributes: [
            AttributeDescription(name: "text", type: .string, optional: true),
            AttributeDescription(name: "number", type: .integer, optional: true),
            AttributeDescription(name: "real", type: .double, optional: true),
            AttributeDescription(name: "flag", type: .boolean, optional: true),
            AttributeDescription(name: "when", type: .date, optional: true),
            AttributeDescription(name: "uid", type: .uuid, optional: true),
            AttributeDescription(name: "blob", type: .binary, optional: true),
            AttributeDescription(name: "doc", type: .json, optional: true),
            AttributeDescription(name: "serial", type: .integer),
        ])

    static let keys = ["text", "number", "real", "flag", "when", "uid", "blob", "doc"]

    func testEveryTypeRoundTripsThroughSaveFetchAndDeltas() async throws {
        let daemon = try Daemon()
        let writer = try await daemon.connect(name: "writer")
        let watcher = try await daemon.connect(name: "watcher")
        _ = try await writer.call(ModelDefine.self, .init(entities: [Self.entity]))
        let collector = ChangeCollector(watcher)
        let request = FetchRequest(entity: "Sample", sort: [SortDescriptor(key: "serial")])
        let subscription = try await watcher.call(ResultsSubscribe.self, .init(request: request, include: .none))
            .subscription

        var generator = SeededGenerator(seed: 0xDA7E)
        let samples = (0..<400).map { serial in Self.randomValues(serial: serial, using: &generator) }
        for chunk in stride(from: 0, to: samples.count, by: 100) {
            let inserted = samples[chunk..<chunk + 100].map { InsertedObject(entity: "Sample", values: $0) }
            _ = try await writer.call(StoreSave.self, .init(inserted: Array(inserted)))
        }

        // Through deltas: every inserted object carries exactly the values sent.
        var delivered: [Int64: [String: JSONValue]] = [:]
        for _ in 0..<4 {
            let change = try await collector.expect(for: subscription)
            for object in change.objects {
                guard let values = object.object?.objectValue, let serial = values["serial"]?.intValue else { continue }
                delivered[serial] = values
            }
        }
        XCTAssertEqual(delivered.count, samples.count)
        for (serial, sent) in samples.enumerated() {
            Self.assertSame(sent, delivered[Int64(serial)] ?? [:], "delta of sample \(serial)")
        }

        // save → fetch → save what was fetched → fetch: nothing drifts.
        let first = try await Self.fetchAll(writer)
        for (serial, sent) in samples.enumerated() { Self.assertSame(sent, first[serial], "fetch of sample \(serial)") }
        let resaved = first.map { object in
            UpdatedObject(
                id: object["id"]!.stringValue!,
                values: Dictionary(uniqueKeysWithValues: Self.keys.map { ($0, object[$0] ?? .null) }))
        }
        _ = try await writer.call(StoreSave.self, .init(updated: resaved))
        let second = try await Self.fetchAll(writer)
        for (serial, sent) in samples.enumerated() {
            Self.assertSame(sent, second[serial], "second fetch of sample \(serial)")
        }

        // A predicate on the value the daemon returned finds the object.
        for object in first.prefix(50) {
            guard let when = object["when"]?.stringValue else { continue }
            let count = try await writer.call(
                StoreCount.self,
                FetchRequest(
                    entity: "Sample", predicate: "when == %@ AND serial == %@",
                    arguments: .array([.string(when), object["serial"]!])))
            XCTAssertEqual(count.count, 1, "when == \(when)")
        }
    }

    /// A string with U+0000 is refused, naming the field, rather than stored
    /// shorter (SQLite's text binding ends at NUL); inside a json value it is kept.
    func testNULInAStringIsRefusedNotTruncated() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(ModelDefine.self, .init(entities: [Self.entity]))
        let error = await assertServerError(.validationFailed) {
            try await client.call(
                StoreSave.self,
                .init(inserted: [InsertedObject(entity: "Sample", values: ["serial": 1, "text": "a\u{0}b"])]))
        }
        let text = "\(error?.message ?? "") \(String(describing: error?.data))"
        XCTAssertTrue(text.contains("NUL"), text)
        let count = try await client.call(StoreCount.self, FetchRequest(entity: "Sample")).count
        XCTAssertEqual(count, 0)
    }

    /// The objects, ordered by serial.
    static func fetchAll(_ client: DepotConnection) async throws -> [[String: JSONValue]] {
        let result = try await client.call(
            StoreFetch.self, FetchRequest(entity: "Sample", sort: [SortDescriptor(key: "serial")]))
        return (result.objects ?? []).compactMap(\.objectValue)
    }

    /// Asserts that `received` holds every value of `sent` unchanged.
    static func assertSame(
        _ sent: [String: JSONValue], _ received: [String: JSONValue], _ what: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        for key in keys {
            let expected = sent[key] ?? .null
            let actual = received[key] ?? .null
            switch (expected, actual) {
            case (.double(let a), .double(let b)) where a == 0:
                // SQLite stores a REAL that is a whole number as an integer: -0.0 reads back as 0.0.
                XCTAssertEqual(a, b, "\(what).\(key)", file: file, line: line)
            case (.double(let a), .double(let b)):
                XCTAssertEqual(
                    a.bitPattern, b.bitPattern, "\(what).\(key): \(a) came back as \(b)", file: file, line: line)
            case (.double(let a), .int(let b)):
                XCTAssertEqual(a, Double(b), "\(what).\(key)", file: file, line: line)
                XCTAssertEqual(Double(b).bitPattern, a.bitPattern, "\(what).\(key)", file: file, line: line)
            default:
                XCTAssertEqual(expected, actual, "\(what).\(key)", file: file, line: line)
            }
        }
    }

    /// Values chosen to break lossy conversions: millisecond dates across
    /// centuries, subnormal and huge doubles, Int64 limits, NUL and combining
    /// marks, empty and odd-length binary.
    static func randomValues(serial: Int, using generator: inout SeededGenerator) -> [String: JSONValue] {
        var values: [String: JSONValue] = ["serial": .int(Int64(serial))]
        let year = Int.random(in: 1..<10_000, using: &generator)
        let day = String(
            format: "%04d-%02d-%02d", year, Int.random(in: 1...12, using: &generator),
            Int.random(in: 1...28, using: &generator))
        let time = String(
            format: "T%02d:%02d:%02d.%03dZ", Int.random(in: 0..<24, using: &generator),
            Int.random(in: 0..<60, using: &generator), Int.random(in: 0..<60, using: &generator),
            Int.random(in: 0..<1000, using: &generator))
        values["when"] = .string(day + time)
        let integers: [Int64] = [
            .min, .max, 0, -1, 1 << 53 + 1, -(1 << 53) - 1, Int64.random(in: .min ... .max, using: &generator),
        ]
        values["number"] = .int(integers.randomElement(using: &generator)!)
        let doubles: [Double] = [
            .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude, .greatestFiniteMagnitude,
            -.greatestFiniteMagnitude, 9_007_199_254_740_993, 1e300, 0.1, -0.0, 1.0 / 3.0,
            Double(bitPattern: UInt64.random(in: 0..<0x7FF0_0000_0000_0000, using: &generator)),
            Double.random(in: -1e6...1e6, using: &generator),
        ]
        values["real"] = .double(doubles.randomElement(using: &generator)!)
        values["flag"] = .bool(Bool.random(using: &generator))
        let texts = [
            "", "e\u{301}", "é", "👩‍👩‍👧", "\u{FEFF}x", "tab\tand\nline", "\"quoted\\\"", "ÅNGSTRÖM",
        ]
        values["text"] = .string(texts.randomElement(using: &generator)! + String(serial))
        values["uid"] = .string(UUID().uuidString.lowercased())
        let bytes = (0..<Int.random(in: 0..<40, using: &generator)).map { _ in
            UInt8.random(in: 0...255, using: &generator)
        }
        values["blob"] = .string(Data(bytes).base64EncodedString())
        values["doc"] = .object([
            "n": .int(Int64(serial)), "list": .array([.double(0.5), .string("x\u{0}y"), .null, .bool(true)]),
            "nested": .object(["big": .int(.max)]),
        ])
        // Some nils, so that nil round-trips too.
        if serial % 7 == 0 { values[keys.randomElement(using: &generator)!] = .null }
        return values
    }
}
