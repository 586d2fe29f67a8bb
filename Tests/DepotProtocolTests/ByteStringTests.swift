import XCTest

@testable import DepotProtocol

/// Text is its UTF-8 bytes (DESIGN.md §4) in the values every layer compares:
/// `ByteString`, `JSONValue`, the evaluator's scalars, wire section types, the
/// predicate lexer and the JSON parser keep apart what Swift's `String ==` joins.
final class ByteStringTests: XCTestCase {
    let composed = "jos\u{E9}"
    let decomposed = "jose\u{301}"

    func testSwiftJoinsWhatByteStringKeepsApart() {
        XCTAssertEqual(composed, decomposed, "the premise: Swift's String == is canonical equivalence")
        XCTAssertEqual("\u{212B}", "\u{C5}")
        XCTAssertNotEqual(ByteString(composed), ByteString(decomposed))
        XCTAssertEqual(Set([composed, decomposed, "\u{C5}", "A\u{30A}", "\u{212B}"].map { ByteString($0) }).count, 5)
        XCTAssertEqual(ByteString(composed), ByteString("jos\u{E9}"))
        XCTAssertFalse(composed.bytesEqual(decomposed))
        // Byte order is code point order: U+0065 'e' < U+00E9 'é'; canonical order would say equal.
        XCTAssertTrue(decomposed.bytesPrecede(composed))
        XCTAssertEqual(
            ["b", composed, "a", decomposed].sortedByBytes().map { Array($0.utf8) },
            ["a", "b", decomposed, composed].map { Array($0.utf8) })
        XCTAssertEqual(ByteString(decomposed).escaped, #""jose\u0301""#)
    }

    /// Equality and order agree with the UTF-8 bytes' for every pair of a mixed sample: empty,
    /// small (inline) and long (heap) strings, prefixes, strings decoded from bytes, and
    /// look-alikes (the comparisons take a memcmp fast path on contiguous storage).
    func testEqualityAndOrderAreTheBytesForEveryLengthAndStorage() {
        let long = String(repeating: "x", count: 300)
        let sample = [
            "", "a", "ab", "b", composed, decomposed, long, long + "a", long + composed, long + decomposed,
            String(decoding: Array((long + "a").utf8), as: UTF8.self), "\u{FFFF}", "\u{10000}", "a\u{0}b", "a\u{0}",
        ]
        for a in sample {
            for b in sample {
                let (bytesA, bytesB) = (Array(a.utf8), Array(b.utf8))
                XCTAssertEqual(a.bytesEqual(b), bytesA == bytesB, "\(bytesA) == \(bytesB)")
                XCTAssertEqual(ByteString(a) == ByteString(b), bytesA == bytesB)
                XCTAssertEqual(a.bytesPrecede(b), bytesA.lexicographicallyPrecedes(bytesB), "\(bytesA) < \(bytesB)")
                if bytesA == bytesB { XCTAssertEqual(ByteString(a).hashValue, ByteString(b).hashValue) }
            }
        }
    }

    func testJSONValuesCompareAndHashStringsByBytes() {
        XCTAssertNotEqual(JSONValue.string(composed), .string(decomposed))
        XCTAssertEqual(JSONValue.string(composed), .string("jos\u{E9}"))
        XCTAssertEqual(Set<JSONValue>([.string(composed), .string(decomposed), .string(composed)]).count, 2)
        XCTAssertNotEqual(JSONValue.array([.string(composed)]), .array([.string(decomposed)]))
        // Member names too: one object per spelling of its name.
        XCTAssertNotEqual(JSONValue.object([composed: 1]), .object([decomposed: 1]))
        XCTAssertEqual(JSONValue.object([composed: 1, "b": [nil, 2.5]]), .object(["b": [nil, 2.5], composed: 1]))
        var dictionary: [JSONValue: Int] = [:]
        dictionary[.string(composed)] = 1
        dictionary[.string(decomposed)] = 2
        XCTAssertEqual(dictionary.count, 2)
        // The other cases compare as before.
        XCTAssertNotEqual(JSONValue.int(1), .double(1))
        XCTAssertEqual(JSONValue.double(0), .double(-0.0))
        XCTAssertEqual(Set<JSONValue>([.double(0), .double(-0.0)]).count, 1)
    }

    func testTheParserRefusesMembersNamedAlikeAndKeepsBytes() throws {
        let bytes = Array(#"{"jos\u00e9": 1, "jose\u0301": 2}"#.utf8)
        XCTAssertThrowsError(try JSONParser.parse(bytes)) { error in
            XCTAssertTrue("\(error)".contains(#""jose\u0301""#), "\(error)")
        }
        // The same bytes twice: the last wins, as before.
        XCTAssertEqual(try JSONParser.parse(#"{"a": 1, "a": 2}"#), ["a": 2])
        let value = try JSONParser.parse(#"{"k": "jose\u0301", "jose\u0301": true}"#)
        XCTAssertEqual(value["k"]?.stringValue.map { Array($0.utf8) }, Array(decomposed.utf8))
        XCTAssertEqual(value.objectValue?.keys.first { $0 != "k" }.map { Array($0.utf8) }, Array(decomposed.utf8))
        XCTAssertEqual(Array(JSONWriter.encode(.string(decomposed))), Array("\"\(decomposed)\"".utf8))
    }

    func testSectionTypesCompareNamesByBytes() {
        XCTAssertNotEqual(
            SectionChange(type: .insert, index: 0, name: composed),
            SectionChange(type: .insert, index: 0, name: decomposed))
        XCTAssertNotEqual(
            SectionInfo(name: composed, indexTitle: "J", count: 1),
            SectionInfo(name: decomposed, indexTitle: "J", count: 1))
    }

    /// The evaluator compares text by bytes; a literal's bytes survive the lexer, even one
    /// starting with a combining mark; only [c]/[d] fold.
    func testTheEvaluatorComparesBytesAndOnlyFoldingJoins() throws {
        let entity = EntityDescription(name: "W", attributes: [AttributeDescription(name: "t", type: .string)])
        let evaluator = PredicateEvaluator(model: [entity], object: { _ in nil }, toMany: { _, _ in [] })
        func matches(_ predicate: String, _ text: String) throws -> Bool {
            try evaluator.evaluate(
                try PredicateParser.parse(predicate), on: ["id": "W/1", "t": .string(text)], entity: "W")
        }
        XCTAssertTrue(try matches("t == 'jos\u{E9}'", composed))
        XCTAssertFalse(try matches("t == 'jos\u{E9}'", decomposed))
        XCTAssertTrue(try matches("t != 'jos\u{E9}'", decomposed))
        XCTAssertFalse(try matches("t IN {'jos\u{E9}', 'x'}", decomposed))
        XCTAssertTrue(try matches("t < 'jos\u{E9}'", decomposed))
        XCTAssertTrue(try matches("t BEGINSWITH 'jose'", decomposed))
        XCTAssertFalse(try matches("t BEGINSWITH 'jose'", composed))
        XCTAssertTrue(try matches("t ENDSWITH '\u{301}'", decomposed))
        XCTAssertTrue(try matches("t == '\u{301}x'", "\u{301}x"), "a literal may start with a combining mark")
        XCTAssertFalse(try matches("t == '\u{212B}'", "\u{C5}"))
        XCTAssertTrue(try matches("t ==[cd] 'jose'", composed))
        XCTAssertTrue(try matches("t ==[cd] 'jose'", decomposed))
        XCTAssertTrue(try matches("t LIKE 'jose*'", decomposed))
        XCTAssertFalse(try matches("t LIKE 'jose?'", composed))
    }
}
