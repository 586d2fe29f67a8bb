import DepotProtocol
import Foundation
import GRDB
import XCTest

@testable import DepotStore

/// The bulk writer (``ObjectShape/write(columnsOf:dictionary:into:)``), which
/// reads SQLite's columns straight into JSON bytes, writes exactly the objects
/// the value path (``ObjectShape/object(from:dictionary:)``) builds: every
/// attribute type, nil, text that needs escaping, to-one and to-many ids.
final class EncodedFetchTests: XCTestCase {
    private let kinds = EntityDescription(
        name: "Kind",
        attributes: [
            AttributeDescription(name: "text", type: .string, optional: true),
            AttributeDescription(name: "number", type: .integer, optional: true),
            AttributeDescription(name: "ratio", type: .double, optional: true),
            AttributeDescription(name: "flag", type: .boolean, optional: true),
            AttributeDescription(name: "at", type: .date, optional: true),
            AttributeDescription(name: "uid", type: .uuid, optional: true),
            AttributeDescription(name: "blob", type: .binary, optional: true),
            AttributeDescription(name: "doc", type: .json, optional: true),
        ],
        relationships: [
            RelationshipDescription(name: "parent", destination: "Kind", inverse: "children"),
            RelationshipDescription(name: "children", destination: "Kind", toMany: true, inverse: "parent"),
            RelationshipDescription(name: "tags", destination: "Tag", toMany: true, inverse: "kinds"),
        ])
    private let tag = EntityDescription(
        name: "Tag", attributes: [AttributeDescription(name: "name", type: .string)],
        relationships: [RelationshipDescription(name: "kinds", destination: "Kind", toMany: true, inverse: "tags")])

    func testTheBulkWriterWritesWhatTheValuePathBuilds() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-enc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("e.sqlite").path)
        _ = try store.defineModel([kinds, tag])
        let texts: [JSONValue] = [
            "plain", "", "quote \" and backslash \\", "lines\nand\ttabs\r", "\u{01}\u{1f}control", "é 😀 日本",
            .null,
        ]
        let numbers: [JSONValue] = [0, -1, 42, .int(Int64.max), .int(Int64.min), .int(Int64.min + 1), .null]
        let ratios: [JSONValue] = [0.0, -2.5, 1e300, 3.0, 0.1, .null]
        var inserted = [
            InsertedObject(entity: "Tag", tempId: "a", values: ["name": "a"]),
            InsertedObject(entity: "Tag", tempId: "b", values: ["name": "b\"b"]),
        ]
        for index in 0..<14 {
            var values: [String: JSONValue] = [
                "text": texts[index % texts.count], "number": numbers[index % numbers.count],
                "ratio": ratios[index % ratios.count], "flag": index % 3 == 2 ? .null : .bool(index % 2 == 0),
                "at": index % 4 == 3 ? .null : .string(ISO8601.string(from: 1.25e9 + Double(index) * 3600.5)),
                "uid": index % 2 == 0 ? .string(UUID().uuidString) : .null,
                "blob": index % 3 == 0 ? .string(Data([0, 1, 2, UInt8(index)]).base64EncodedString()) : .null,
                "doc": index % 2 == 1 ? ["k": [1, "two", nil], "n": .int(Int64(index))] : .null,
                "tags": index % 3 == 0 ? ["a", "b"] : index % 3 == 1 ? ["b"] : [],
            ]
            if index > 0 && index % 2 == 0 { values["parent"] = .string("k\(index / 2)") }
            inserted.append(InsertedObject(entity: "Kind", tempId: "k\(index)", values: values))
        }
        _ = try store.save(StoreSave.Parameters(inserted: inserted), writeScope: .unrestricted)

        let requests: [(DepotProtocol.FetchRequest, Bool)] = [
            (DepotProtocol.FetchRequest(entity: "Kind"), false),
            (DepotProtocol.FetchRequest(entity: "Kind", resultType: .dictionaries), true),
            (
                DepotProtocol.FetchRequest(entity: "Kind", properties: ["text", "children", "tags", "parent", "doc"]),
                false
            ),
            (DepotProtocol.FetchRequest(entity: "Kind", resultType: .dictionaries, properties: ["tags"]), true),
            (DepotProtocol.FetchRequest(entity: "Tag", properties: ["name", "kinds"]), false),
            (DepotProtocol.FetchRequest(entity: "Kind", resultType: .dictionaries, properties: []), true),
        ]
        for (request, dictionary) in requests {
            let plan = try FetchPlan(request, scope: .unrestricted, schema: store.schema)
            let expected = try store.read { db in
                try Row.fetchAll(db, sql: plan.objectsSQL, arguments: plan.arguments).map {
                    plan.shape.object(from: $0, dictionary: dictionary)
                }
            }
            XCTAssertEqual(expected.count, request.entity == "Tag" ? 2 : 14)
            XCTAssertEqual(try store.fetch(request, scope: .unrestricted).objects, expected, "\(request)")
        }
    }
}
