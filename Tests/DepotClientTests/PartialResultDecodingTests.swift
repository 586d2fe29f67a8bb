import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotClient

/// Streamed fetches decode their objects straight from the partial-result bytes
/// (``PartialResultChunk``): the outcome must be exactly what parsing each
/// message into a ``JSONValue`` and decoding that gave, for every attribute
/// type, escapes, unicode, nulls and to-many ids, across chunk boundaries.
final class PartialResultDecodingTests: XCTestCase {
    /// A caller's own type over every attribute type.
    struct Typed: Decodable, Equatable, Sendable {
        var id: String
        var entity: String
        var version: Int64?
        var name: String
        var note: String?
        var count: Int64
        var small: Int?
        var ratio: Double
        var flag: Bool
        var when: Date
        var maybeWhen: Date?
        var key: UUID
        var blob: Data?
        var owner: String?
        var tags: [String]
        var extra: JSONValue?
    }

    /// A type that makes itself from a ``DepotObject``.
    struct Made: FetchRequestResult, Decodable, Equatable {
        var id: String
        var name: String
        var tagCount: Int

        init(depotObject: DepotObject) throws {
            id = depotObject.id
            name = depotObject.string("name") ?? ""
            tagCount = depotObject.objectIDs("tags")?.count ?? -1
        }
    }

    func testChunksDecodeAsTheParsedMessagesDid() throws {
        var random = SeededGenerator(seed: 28)
        for round in 0..<40 {
            let objects = (0..<Int.random(in: 1...120, using: &random)).map { Self.randomObject($0, &random) }
            let frames = Self.frames(of: objects, token: "objects-\(round)", &random)
            XCTAssertEqual(
                try Self.viaChunks(frames, as: DepotObject.self), try Self.viaTree(frames, as: DepotObject.self),
                "round \(round)")
            XCTAssertEqual(
                try Self.viaChunks(frames, as: Typed.self), try Self.viaTree(frames, as: Typed.self), "round \(round)")
            XCTAssertEqual(
                try Self.viaChunks(frames, as: Made.self), try Self.viaTree(frames, as: Made.self), "round \(round)")
            XCTAssertEqual(
                try Self.viaChunks(frames, as: [String: JSONValue].self, dictionaries: true),
                try Self.viaTree(frames, as: [String: JSONValue].self, dictionaries: true), "round \(round)")
            let decoded = try Self.viaChunks(frames, as: DepotObject.self)
            XCTAssertEqual(decoded.count, objects.count)
            XCTAssertEqual(decoded.map(\.id), objects.map { $0["id"]?.stringValue ?? "" })
        }
    }

    func testBadObjectsFailAsBefore() throws {
        let frames = [
            Self.frame(objectsJSON: #"{"entity":"Item","name":"no id"}"#, token: "t"),
            Self.frame(objectsJSON: #"{"id":7,"entity":"Item"}"#, token: "t"),
            Self.frame(objectsJSON: #"{"id":"Item/1","entity":"Item","version":1,"name":5}"#, token: "t"),
            Self.frame(objectsJSON: #"{"id":"Item/1","entity":"Item","version":1,"name":null}"#, token: "t"),
        ]
        struct Named: Decodable, Sendable {
            var name: String
        }
        for frame in frames {
            XCTAssertThrowsError(try Self.viaTree([frame], as: Named.self))
            XCTAssertThrowsError(try Self.viaChunks([frame], as: Named.self)) { error in
                XCTAssertTrue("\(error)".contains("invalid"), "\(error)")
            }
        }
        // Anything but a partial result takes the ordinary path.
        XCTAssertNil(PartialResultChunk.scan(Array(#"{"jsonrpc":"2.0","id":1,"result":{"objects":[]}}"#.utf8)))
        XCTAssertNil(
            PartialResultChunk.scan(
                Array(#"{"jsonrpc":"2.0","method":"$/progress","params":{"token":"t","value":{"kind":"end"}}}"#.utf8)))
        XCTAssertNil(
            PartialResultChunk.scan(Array(#"{"jsonrpc":"2.0","method":"store/didSave","params":{"x":1}}"#.utf8)))
    }

    func testWireDatesReadAsTheFormatterReadsThem() throws {
        var random = SeededGenerator(seed: 2801)
        let formatter = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        for _ in 0..<5_000 {
            let milliseconds = Int64.random(in: -5_000_000_000_000...8_000_000_000_000, using: &random)
            let text = ISO8601.string(from: Double(milliseconds) / 1000)
            let date = try XCTUnwrap(DepotDate.parse(text), text)
            XCTAssertEqual(date, Date(timeIntervalSinceReferenceDate: Double(milliseconds - 978_307_200_000) / 1000))
            let formatted = try formatter.parse(text)
            XCTAssertEqual(
                date.timeIntervalSinceReferenceDate, formatted.timeIntervalSinceReferenceDate, accuracy: 1e-6, text)
        }
        // Other forms still go to the formatter.
        XCTAssertEqual(
            DepotDate.parse("2026-01-01T02:00:00+02:00"), DepotDate.parse("2026-01-01T00:00:00.000Z"))
        XCTAssertEqual(DepotDate.parse("2026-01-01T00:00:00Z"), DepotDate.parse("2026-01-01T00:00:00.0Z"))
        XCTAssertNil(DepotDate.parse("not a date"))
        // Before 1583 the formatter's calendar is Julian: its answer stands.
        XCTAssertEqual(DepotDate.parse("1500-03-01T00:00:00.000Z"), try formatter.parse("1500-03-01T00:00:00.000Z"))
    }

    // MARK: The two paths

    /// The old path: each message parsed into a tree, each object made from it.
    static func viaTree<Object: Decodable & Sendable>(
        _ frames: [[UInt8]], as type: Object.Type, dictionaries: Bool = false
    ) throws -> [Object] {
        var objects: [Object] = []
        for frame in frames {
            let message = try Message.decode(try JSONParser.parse(frame))
            guard case .notification(_, let params?) = message, let items = params["value"]?["objects"]?.arrayValue
            else { throw DepotClientError.invalidResponse("not a chunk") }
            for json in items {
                if dictionaries {
                    objects.append(try DepotObject.decode(Object.self, from: json))
                } else {
                    objects.append(try Object.make(from: try DepotObject(json: json)))
                }
            }
        }
        return objects
    }

    /// The new path: found in the bytes, decoded from them.
    static func viaChunks<Object: Decodable & Sendable>(
        _ frames: [[UInt8]], as type: Object.Type, dictionaries: Bool = false
    ) throws -> [Object] {
        var objects: [Object] = []
        for frame in frames {
            guard let (_, chunk) = PartialResultChunk.scan(frame) else {
                throw DepotClientError.invalidResponse("not found as a chunk")
            }
            let batch = try chunk.objects(as: Object.self, dictionaries: dictionaries)
            XCTAssertEqual(batch.count, chunk.count)
            objects += batch
        }
        return objects
    }

    // MARK: Random objects and their messages

    static func randomObject(_ index: Int, _ random: inout SeededGenerator) -> [String: JSONValue] {
        func maybe(_ value: JSONValue) -> JSONValue { Bool.random(using: &random) ? value : .null }
        let doubles: [Double] = [
            0, -0.5, 1.0, 3.0e300, -2.5e-300, .pi, 1e15, 123_456_789.125,
            Double(Int64.random(in: -9...9, using: &random)),
            Double.random(in: -1e6...1e6, using: &random),
        ]
        let integers: [Int64] = [0, -1, .max, .min, 42, Int64.random(in: .min ... .max, using: &random)]
        var object: [String: JSONValue] = [
            "id": .string("Item/\(index + 1)"), "entity": "Item",
            "version": .int(Int64.random(in: 1...9, using: &random)),
            "name": .string(randomText(&random)), "note": maybe(.string(randomText(&random))),
            "count": .int(integers.randomElement(using: &random)!),
            "small": maybe(.int(Int64.random(in: -1000...1000, using: &random))),
            "ratio": .double(doubles.randomElement(using: &random)!), "flag": .bool(Bool.random(using: &random)),
            "when": .string(
                ISO8601.string(from: Double(Int64.random(in: 0...4_000_000_000_000, using: &random)) / 1000)),
            "maybeWhen": maybe(
                .string(ISO8601.string(from: Double(Int64.random(in: -1_000_000...1_000_000, using: &random))))),
            "key": .string(randomUUID(&random).uuidString),
            "blob": maybe(
                .string(
                    Data(
                        (0..<Int.random(in: 0...12, using: &random)).map { _ in
                            UInt8.random(in: 0...255, using: &random)
                        }
                    ).base64EncodedString())),
            "owner": maybe(.string("Team/\(Int.random(in: 1...99, using: &random))")),
            "tags": .array(
                (0..<Int.random(in: 0...5, using: &random)).map { _ in
                    .string("Tag/\(Int.random(in: 1...999, using: &random))")
                }),
        ]
        if Bool.random(using: &random) {
            object["extra"] = ["nested": ["a": [1, 2.5, "x\u{1F600}"], "b": nil], "flag": true]
        }
        if index % 7 == 3 { object["version"] = nil }  // a fetch narrowed by properties carries none
        return object
    }

    static func randomUUID(_ random: inout SeededGenerator) -> UUID {
        let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }
        return bytes.withUnsafeBufferPointer { NSUUID(uuidBytes: $0.baseAddress!) as UUID }
    }

    static func randomText(_ random: inout SeededGenerator) -> String {
        let pieces = [
            "plain", "quote\"d", "back\\slash", "new\nline", "tab\t", "\u{01}ctl", "é", "日本語", "👍🏽", "e\u{301}",
            "slash/", " ", "\u{7F}", "\u{2028}", "",
        ]
        return (0..<Int.random(in: 0...5, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }

    /// The objects split into chunks of random sizes, each a `$/progress` message as the daemon frames it
    /// (some strings and names escaped more than they need, white space here and there).
    static func frames(of objects: [[String: JSONValue]], token: String, _ random: inout SeededGenerator) -> [[UInt8]] {
        var frames: [[UInt8]] = []
        var start = 0
        while start < objects.count {
            let end = min(objects.count, start + Int.random(in: 1...40, using: &random))
            let json = objects[start..<end].map { object in
                var writer: [UInt8] = []
                write(.object(object), into: &writer, &random)
                return String(decoding: writer, as: UTF8.self)
            }.joined(separator: Bool.random(using: &random) ? "," : " ,\n ")
            frames.append(frame(objectsJSON: json, token: token))
            start = end
        }
        return frames
    }

    static func frame(objectsJSON: String, token: String) -> [UInt8] {
        var params = JSONWriter()
        params.writeRaw("{\"token\":")
        params.write(token)
        params.writeRaw(",\"value\":{\"objects\":[")
        params.writeRaw(Array(objectsJSON.utf8))
        params.writeRaw("]}}")
        return MessageEncoder.notification(method: ProgressNotification.name, paramsJSON: params.bytes)
    }

    /// JSON for `value`, with strings now and then escaped beyond need (`\u` escapes, `\/`).
    static func write(_ value: JSONValue, into bytes: inout [UInt8], _ random: inout SeededGenerator) {
        switch value {
        case .string(let text): writeString(text, into: &bytes, &random)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { bytes.append(UInt8(ascii: ",")) }
                write(element, into: &bytes, &random)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (offset, key) in members.keys.sorted().enumerated() {
                if offset > 0 {
                    bytes.append(contentsOf: Bool.random(using: &random) ? Array(",".utf8) : Array(" , ".utf8))
                }
                writeString(key, into: &bytes, &random)
                bytes.append(UInt8(ascii: ":"))
                write(members[key]!, into: &bytes, &random)
            }
            bytes.append(UInt8(ascii: "}"))
        default: bytes.append(contentsOf: JSONWriter.encode(value))
        }
    }

    static func writeString(_ text: String, into bytes: inout [UInt8], _ random: inout SeededGenerator) {
        guard Int.random(in: 0..<4, using: &random) == 0 else {
            return bytes.append(contentsOf: JSONWriter.encode(.string(text)))
        }
        bytes.append(UInt8(ascii: "\""))
        for unit in text.utf16 {
            switch unit {
            case 0x2F: bytes.append(contentsOf: Array(#"\/"#.utf8))
            case 0x22: bytes.append(contentsOf: Array(#"\""#.utf8))
            case 0x5C: bytes.append(contentsOf: Array(#"\\"#.utf8))
            case 0x20..<0x7F: bytes.append(UInt8(unit))
            default: bytes.append(contentsOf: Array(String(format: "\\u%04x", unit).utf8))
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
