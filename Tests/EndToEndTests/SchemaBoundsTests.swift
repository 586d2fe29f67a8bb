import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Walks `proto/depot.openrpc.json` and tries, against a real daemon, each
/// numeric bound of every method's params: the bound itself is accepted, its
/// neighbour outside is -32602 naming the field and the value (issue 18 item 5).
final class SchemaBoundsTests: XCTestCase {
    /// One numeric bound: the member's path under `params`, and the bound.
    struct Bound: CustomStringConvertible {
        var method: String
        var path: [String]
        var value: Int64
        var isMinimum: Bool

        var outside: Int64 { isMinimum ? value - 1 : value + 1 }
        var field: String { (["params"] + path).joined(separator: ".") }
        var description: String { "\(method) \(field) \(isMinimum ? "minimum" : "maximum") \(value)" }
    }

    static var document: JSONValue {
        let url = Fixtures.directory.deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("proto/depot.openrpc.json")
        return try! JSONParser.parse(Array(try! Data(contentsOf: url)))
    }

    /// Every integer bound reachable from `schema` (through `$ref`, `anyOf` and object members).
    static func bounds(
        in schema: JSONValue, path: [String], method: String, components: JSONValue, into found: inout [Bound]
    ) {
        if let reference = schema["$ref"]?.stringValue {
            let name = String(reference.split(separator: "/").last!)
            return bounds(in: components[name]!, path: path, method: method, components: components, into: &found)
        }
        for alternative in schema["anyOf"]?.arrayValue ?? [] {
            bounds(in: alternative, path: path, method: method, components: components, into: &found)
        }
        if schema["type"] == "integer" {
            if let minimum = schema["minimum"]?.intValue {
                found.append(Bound(method: method, path: path, value: minimum, isMinimum: true))
            }
            if let maximum = schema["maximum"]?.intValue {
                found.append(Bound(method: method, path: path, value: maximum, isMinimum: false))
            }
        }
        for (key, member) in schema["properties"]?.objectValue ?? [:] {
            bounds(in: member, path: path + [key], method: method, components: components, into: &found)
        }
    }

    /// Valid params for each method that has bounds; `$SUB` stands for a live subscription.
    static let baseParams: [String: String] = [
        "store/fetch": #"{"entity":"Team"}"#,
        "store/count": #"{"entity":"Team"}"#,
        "store/history": #"{"since":0}"#,
        "results/subscribe":
            #"{"request":{"entity":"Team","sort":[{"key":"teamName"}]},"resume":{"transaction":1,"digest":"\#(String(repeating: "0", count: 64))"}}"#,
        "results/objects": #"{"subscription":"$SUB","offset":0,"length":1}"#,
        "server/stats": "{}",
    ]

    /// Members that `results/subscribe` refuses whatever their value (no live windows yet, docs/fetched-results.md).
    static let refusedForOtherReasons: Set<String> = ["params.request.limit", "params.request.offset"]

    /// `params` (JSON text) with `path` set to `value`.
    static func setting(_ params: String, _ path: [String], to value: Int64) throws -> String {
        func set(_ json: JSONValue, _ path: ArraySlice<String>) -> JSONValue {
            guard let key = path.first else { return .int(value) }
            var members = json.objectValue ?? [:]
            members[key] = set(members[key] ?? .object([:]), path.dropFirst())
            return .object(members)
        }
        let json = try JSONParser.parse(Array(params.utf8))
        return String(decoding: JSONWriter.encode(set(json, path[...])), as: UTF8.self)
    }

    func testEveryNumericBoundOfEveryMethodIsEnforced() async throws {
        let document = Self.document
        let components = document["components"]!["schemas"]!
        var found: [Bound] = []
        for method in document["methods"]!.arrayValue! {
            let name = method["name"]!.stringValue!
            Self.bounds(in: method["x-params-schema"]!, path: [], method: name, components: components, into: &found)
        }
        XCTAssertGreaterThanOrEqual(found.count, 10, "the walker found the schema's bounds: \(found)")
        XCTAssertTrue(found.contains { $0.method == "store/history" && $0.field == "params.since" })

        let daemon = try Daemon()
        let client = try await daemon.connect()
        try await client.loadWorldCup()
        client.abort()
        let raw = try RawClient(endpoint: daemon.endpoint)
        try raw.initialize()
        let subscription =
            try raw.call("results/subscribe", Self.baseParams["results/subscribe"]!)["result"]?["subscription"]?
            .stringValue ?? "none"

        var id = 10
        for bound in found {
            guard let base = Self.baseParams[bound.method] else {
                XCTFail("no base params for \(bound.method): add them so that \(bound) is tried")
                continue
            }
            let params = base.replacingOccurrences(of: "$SUB", with: subscription)
            id += 1
            let inside = try raw.call(bound.method, try Self.setting(params, bound.path, to: bound.value), id: id)
            if !Self.refusedForOtherReasons.contains(bound.field) || bound.method != "results/subscribe" {
                XCTAssertNil(inside["error"], "\(bound): the bound itself is allowed, got \(inside)")
            }
            id += 1
            let outside = try raw.call(bound.method, try Self.setting(params, bound.path, to: bound.outside), id: id)
            XCTAssertEqual(outside["error"]?["code"], -32602, "\(bound): \(bound.outside) is refused")
            XCTAssertEqual(outside["error"]?["data"]?["field"]?.stringValue, bound.field, "\(bound)")
            let message = outside["error"]?["message"]?.stringValue ?? ""
            XCTAssertTrue(message.contains(bound.field) && message.contains("\(bound.outside)"), message)
            XCTAssertTrue(message.contains("allowed"), message)
        }
        // Nothing the refused requests carried reached the store, and the daemon still answers.
        XCTAssertEqual(try raw.call("store/count", #"{"entity":"Team"}"#)["result"]?["count"], 32)
        XCTAssertEqual(try raw.call("store/history", #"{"since":0}"#)["result"]?["latest"], 1)
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }

    func testEnumValuesAreNamedWithWhatIsAllowed() throws {
        let daemon = try Daemon()
        let raw = try RawClient(endpoint: daemon.endpoint)
        try raw.initialize()
        var response = try raw.call(
            "model/define", #"{"entities":[{"name":"A","attributes":[{"name":"x","type":"weird"}]}]}"#)
        XCTAssertEqual(response["error"]?["code"], -32602)
        XCTAssertEqual(response["error"]?["data"]?["field"], "params.entities[0].attributes[0].type")
        var message = response["error"]?["message"]?.stringValue ?? ""
        XCTAssertTrue(message.contains("\"weird\"") && message.contains("string, integer, double"), message)
        XCTAssertFalse(message.contains("Cannot initialize"), message)
        response = try raw.call("store/fetch", #"{"entity":"A","resultType":"everything"}"#)
        message = response["error"]?["message"]?.stringValue ?? ""
        XCTAssertTrue(message.contains("params.resultType") && message.contains("objects, ids"), message)
        response = try raw.call("store/save", #"{"mergePolicy":7}"#)
        message = response["error"]?["message"]?.stringValue ?? ""
        XCTAssertEqual(response["error"]?["data"]?["field"], "params.mergePolicy")
        XCTAssertTrue(message.contains("error, objectTrump") && message.contains("got 7"), message)
        XCTAssertEqual(try raw.call("model/get")["result"]?["version"], 0, "nothing was defined")
        XCTAssertEqual(daemon.stop(), 0)
        daemon.removeData()
    }
}
