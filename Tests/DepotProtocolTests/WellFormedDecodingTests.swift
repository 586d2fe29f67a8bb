import XCTest

@testable import DepotProtocol

/// The direct reading of `store/save` params equals the `Codable` one for
/// every input it accepts, and leaves every other input to `Codable`, whose
/// error names the bad value.
final class WellFormedDecodingTests: XCTestCase {
    private func parse(_ text: String) throws -> JSONValue { try JSONParser.parse(Array(text.utf8)) }

    func testAcceptedInputDecodesAsCodableDoes() throws {
        let inputs = [
            "{}",
            #"{"inserted": [{"entity": "Item", "values": {"name": "a", "score": 1, "at": 2.5, "tags": [1, "x"]}}]}"#,
            #"{"inserted": [{"entity": "Item", "tempId": "t1"}], "author": "me", "mergePolicy": "overwrite"}"#,
            #"{"inserted": [{"entity": "Item"}], "saveId": "9f1c2d3e-save"}"#,
            #"{"updated": [{"id": "Item/3", "version": 4, "original": {"name": "b"}, "values": {"name": null}}]}"#,
            #"{"updated": [{"id": "Item/3", "version": null, "values": {}}], "deleted": [{"id": "Item/9"}]}"#,
            #"{"deleted": [{"id": "Item/9", "version": 2}], "author": null, "mergePolicy": null, "extra": 1}"#,
        ]
        for text in inputs {
            let json = try parse(text)
            let direct = try XCTUnwrap(StoreSave.Parameters(wellFormed: json), text)
            XCTAssertEqual(direct, try JSONValueDecoder.decode(StoreSave.Parameters.self, from: json), text)
        }
    }

    func testAnythingElseGoesToCodableAndItsError() throws {
        let refused: [(String, String)] = [
            (#"{"inserted": {"entity": "Item"}}"#, "params.inserted"),
            (#"{"inserted": [{"values": {}}]}"#, "params.inserted[0].entity"),
            (#"{"inserted": [{"entity": 3}]}"#, "params.inserted[0].entity"),
            (#"{"updated": [{"id": "Item/1"}]}"#, "params.updated[0].values"),
            (#"{"updated": [{"id": "Item/1", "version": "2", "values": {}}]}"#, "params.updated[0].version"),
            (#"{"deleted": [{"id": 1}]}"#, "params.deleted[0].id"),
            (#"{"mergePolicy": "newest"}"#, "params.mergePolicy"),
            (#"{"author": 7}"#, "params.author"),
            (#"{"saveId": 7}"#, "params.saveId"),
        ]
        for (text, field) in refused {
            let json = try parse(text)
            XCTAssertNil(StoreSave.Parameters(wellFormed: json), text)
            XCTAssertThrowsError(try JSONCoding.decode(StoreSave.Parameters.self, from: json), text) { error in
                XCTAssertEqual((error as? RPCError)?.data?["field"], .string(field), "\(text): \(error)")
            }
        }
    }
}
