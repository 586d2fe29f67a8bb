import XCTest

@testable import DepotProtocol

final class JSONTests: XCTestCase {
    func testParsesAndWritesEveryKind() throws {
        let text = #"{"a":[1,-2.5,1e3,true,false,null,"x\n\u00e9\ud83d\ude00"],"b":{},"c":[],"d":9223372036854775807}"#
        let value = try JSONParser.parse(text)
        XCTAssertEqual(value["a"]?.arrayValue?[0], .int(1))
        XCTAssertEqual(value["a"]?.arrayValue?[1], .double(-2.5))
        XCTAssertEqual(value["a"]?.arrayValue?[2], .double(1000))
        XCTAssertEqual(value["a"]?.arrayValue?[6], .string("x\né😀"))
        XCTAssertEqual(value["d"], .int(Int64.max))
        XCTAssertEqual(try JSONParser.parse(JSONWriter.encode(value)), value, "round trip")
        XCTAssertEqual(
            String(decoding: JSONWriter.encode(["b": 1, "a": [nil, 2.0]]), as: UTF8.self), #"{"a":[null,2.0],"b":1}"#)
    }

    func testIntegersRoundTripAtEveryLength() throws {
        var numbers: [Int64] = [0, -1, 7, Int64.max, Int64.min, Int64.min + 1, Int64.max - 1]
        var power: Int64 = 1
        for _ in 0..<18 {
            power *= 10
            numbers += [power - 1, power, power + 1, -(power - 1), -power]
        }
        for number in numbers {
            let bytes = JSONWriter.encode(.int(number))
            XCTAssertEqual(String(decoding: bytes, as: UTF8.self), String(number))
            XCTAssertEqual(try JSONParser.parse(bytes), .int(number))
        }
        XCTAssertEqual(try JSONParser.parse("-0"), .int(0))
        XCTAssertEqual(try JSONParser.parse("9223372036854775808"), .double(9_223_372_036_854_775_808))
        XCTAssertEqual(
            String(decoding: JSONWriter.encode("a\"b\\c\u{01}\n😀"), as: UTF8.self), #""a\"b\\c\u0001\n😀""#)
    }

    func testRejectsMalformedInputWithAnOffset() {
        for (text, offset) in [
            ("{", 1), ("[1,]", 3), ("{\"a\" 1}", 5), ("01", 1), ("\"\\x\"", 3), ("tru", 0), ("[1] x", 4),
            ("\"\u{01}\"", 1), ("\"\\ud800\"", 7),
        ] {
            XCTAssertThrowsError(try JSONParser.parse(text), text) { error in
                XCTAssertEqual((error as? JSONParser.Failure)?.offset, offset, "\(text): \(error)")
            }
        }
        XCTAssertThrowsError(try JSONParser.parse([0x22, 0xFF, 0x22]), "invalid UTF-8")
    }

    func testDepthIsBounded() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        XCTAssertThrowsError(try JSONParser.parse(deep)) { error in
            XCTAssertTrue("\(error)".contains("nesting"))
        }
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        XCTAssertNoThrow(try JSONParser.parse(fine))
    }

    func testRandomBytesNeverCrash() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array(#"{}[]",:0123456789.eE+-truefalsnl\ "#.utf8)
        for _ in 0..<20_000 {
            let bytes = (0..<Int.random(in: 0..<40, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }
            if let value = try? JSONParser.parse(bytes) {
                XCTAssertEqual(try? JSONParser.parse(JSONWriter.encode(value)), value)
            }
        }
    }
}

final class MessageTests: XCTestCase {
    func testClassifiesMessages() throws {
        XCTAssertEqual(
            try Message.decode(try JSONParser.parse(#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#)),
            .request(id: .string("a"), method: "ping", params: nil))
        XCTAssertEqual(
            try Message.decode(try JSONParser.parse(#"{"jsonrpc":"2.0","method":"x","params":[1]}"#)),
            .notification(method: "x", params: [1]))
        XCTAssertEqual(
            try Message.decode(try JSONParser.parse(#"{"jsonrpc":"2.0","id":3,"result":{}}"#)),
            .result(id: .number(3), result: [:]))
        let error = try Message.decode(
            try JSONParser.parse(#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#))
        XCTAssertEqual(error, .error(id: nil, error: RPCError(code: .parseError, message: "bad")))
    }

    func testRejectsInvalidRequests() throws {
        let cases = [
            #"[]"#, #"{"jsonrpc":"2.0"}"#, #"{"jsonrpc":"2","id":1,"method":"x"}"#,
            #"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            #"{"jsonrpc":"2.0","id":1,"method":""}"#, #"{"jsonrpc":"2.0","id":1,"method":"x","params":"p"}"#,
        ]
        for text in cases {
            XCTAssertThrowsError(try Message.decode(try JSONParser.parse(text)), text) { error in
                XCTAssertEqual((error as? InvalidMessage)?.error.code, .invalidRequest, text)
            }
        }
        XCTAssertThrowsError(try Message.decode(try JSONParser.parse(#"{"jsonrpc":"1.0","id":7,"method":"x"}"#))) {
            error in
            XCTAssertEqual((error as? InvalidMessage)?.id, .number(7), "the id survives for the error response")
        }
    }

    func testTypedParamsNameTheBadField() {
        XCTAssertThrowsError(try JSONCoding.decode(FetchRequest.self, from: ["entity": "Team", "sort": [["key": 3]]])) {
            error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.sort[0].key")
            XCTAssertTrue((error as? RPCError)?.message.contains("must be a string") == true, "\(error)")
        }
        XCTAssertThrowsError(try JSONCoding.decode(StoreSave.Parameters.self, from: ["inserted": [["values": [:]]]])) {
            error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.inserted[0].entity")
        }
    }

    /// A batch's objects are taken as they are (no container per member) and still decode,
    /// encode and fail as any other field does.
    func testBatchObjectsDecodeAndEncodeAsTheyAre() throws {
        let objects: JSONValue = [["name": "a", "n": nil, "tags": [1, 2]], [:], ["nested": ["x": 1.5]]]
        let decoded = try JSONCoding.decode(BatchInsert.Parameters.self, from: ["entity": "Item", "objects": objects])
        XCTAssertEqual(decoded.objects, objects.arrayValue?.map { $0.objectValue ?? [:] })
        XCTAssertEqual(decoded.objects[0]["n"], .null)
        XCTAssertEqual(try JSONCoding.encode(decoded)["objects"], objects)
        XCTAssertThrowsError(
            try JSONCoding.decode(BatchInsert.Parameters.self, from: ["entity": "Item", "objects": [["a": 1], 2]])
        ) { error in
            XCTAssertEqual((error as? RPCError)?.code, .invalidParams)
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.objects[1]")
        }
        XCTAssertThrowsError(
            try JSONCoding.decode(BatchInsert.Parameters.self, from: ["entity": "Item", "objects": ["a": 1]])
        ) { error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.objects")
        }
    }

    func testResponsesAreBuiltAroundEncodedResults() throws {
        let bytes = MessageEncoder.response(id: .number(4), resultJSON: Array(#"{"ok":true}"#.utf8))
        XCTAssertEqual(try JSONParser.parse(bytes), ["jsonrpc": "2.0", "id": 4, "result": ["ok": true]])
        let progress = WorkDoneProgress(kind: .begin, title: "Fetching Item").json
        XCTAssertEqual(progress["total"], .null, "begin always carries total")
    }

    /// The save result written straight to bytes is byte for byte what the Encoder writes, whatever its maps hold.
    func testSaveResultBytesEqualTheEncodedResult() throws {
        var generator = SplitMix64(state: 28)
        let keys = ["t1", "Item/12", "é\"\\\n", "a", "B", "😀", "Item/2", "item/10", ""]
        let results =
            [
                StoreSave.Result(ids: [:], versions: [:], transaction: 0),
                StoreSave.Result(ids: ["t1": "Item/1"], versions: ["Item/1": 1], transaction: 7),
            ]
            + (0..<200).map { _ in
                StoreSave.Result(
                    ids: Dictionary(
                        (0..<Int.random(in: 0...4, using: &generator)).map { _ in
                            (keys.randomElement(using: &generator)!, keys.randomElement(using: &generator)!)
                        }, uniquingKeysWith: { first, _ in first }),
                    versions: Dictionary(
                        (0..<Int.random(in: 0...6, using: &generator)).map { _ in
                            (keys.randomElement(using: &generator)!, Int64.random(in: .min ... .max, using: &generator))
                        }, uniquingKeysWith: { first, _ in first }),
                    transaction: Int64.random(in: 0...Int64.max, using: &generator))
            }
        for result in results {
            XCTAssertEqual(
                String(decoding: result.jsonBytes, as: UTF8.self),
                String(decoding: try JSONCoding.encodeBytes(result), as: UTF8.self))
            XCTAssertEqual(
                try JSONCoding.decode(StoreSave.Result.self, from: JSONParser.parse(result.jsonBytes)), result)
        }
    }
}

/// A fixed-seed generator (SplitMix64), so that a failing sequence runs again the same
/// (this target does not depend on DepotTestSupport's `SeededGenerator`).
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

final class JSONStreamReaderTests: XCTestCase {
    /// Members and elements read one at a time equal a whole parse; skipping counts elements.
    func testReadsMembersAndElementsAndSkips() throws {
        let text = #"{"entity":"Item","objects":[{"a":1,"s":"x,]}\"y"},[1,[2]],"s",3.5,null,{}],"n":-2e3,"t":true}"#
        let bytes = Array(text.utf8)
        let whole = try JSONParser.parse(bytes)
        let (members, skipped) = try JSONStreamReader.read(bytes) { reader in
            var members: [String: JSONValue] = [:]
            var skipped: (range: Range<Int>, elements: Int?)?
            try reader.beginObject()
            while let key = try reader.nextKey() {
                if key == "objects" {
                    skipped = try reader.skipValue()
                } else {
                    members[key] = try reader.value()
                }
            }
            try reader.end()
            return (members, skipped)
        }
        XCTAssertEqual(members["entity"], whole["entity"])
        XCTAssertEqual(members["n"], whole["n"])
        XCTAssertEqual(members["t"], .bool(true))
        XCTAssertEqual(skipped?.elements, 6)
        let range = try XCTUnwrap(skipped?.range)
        let elements = try JSONStreamReader.read(bytes, range: range) { reader in
            var elements: [JSONValue] = []
            try reader.beginArray()
            while try reader.nextElement() { elements.append(try reader.value()) }
            try reader.end()
            return elements
        }
        XCTAssertEqual(.array(elements), whole["objects"])
    }

    /// Broken input fails with an offset, as a whole parse does.
    func testRefusesBrokenInput() {
        for text in [#"{"a" 1}"#, #"{"a":1,}"#, #"[1 2]"#, #"{"a":[1,2}"#, #"{"a":"unterminated"#] {
            let bytes = Array(text.utf8)
            XCTAssertThrowsError(
                try JSONStreamReader.read(bytes) { reader in
                    try reader.beginObject()
                    while let _ = try reader.nextKey() { _ = try reader.skipValue() }
                    try reader.end()
                }, text)
        }
    }
}
