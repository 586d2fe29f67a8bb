import DepotProtocol
import DepotTestSupport
import XCTest

@testable import DepotServer

/// The hand-written shared part of `results/didChange` says what the
/// protocol's `Codable` types say, for random changes.
final class SharedDeltaTests: XCTestCase {
    func testTheDirectEncodingEqualsTheCodableOne() throws {
        var generator = SeededGenerator(seed: 7)
        let names = ["", "Europe", "Côte d'Ivoire", "quote \" and \\ back", "日本", "line\nbreak"]
        for _ in 0..<300 {
            let sections = (0..<Int.random(in: 0...3, using: &generator)).map { _ in
                SectionChange(
                    type: Bool.random(using: &generator) ? .insert : .delete,
                    index: Int.random(in: 0...9, using: &generator),
                    name: names.randomElement(using: &generator)!)
            }
            let objects = (0..<Int.random(in: 0...5, using: &generator)).map { number in
                let type = [ObjectChange.Kind.insert, .delete, .move, .update].randomElement(using: &generator)!
                let path = [Int.random(in: 0...3, using: &generator), Int.random(in: 0...50, using: &generator)]
                return ObjectChange(
                    type: type, indexPath: type == .insert ? nil : path, newIndexPath: type == .delete ? nil : path,
                    id: "Team/\(number)",
                    object: type == .delete
                        ? nil
                        : [
                            "id": .string("Team/\(number)"), "name": .string(names.randomElement(using: &generator)!),
                            "wins": .int(Int64.random(in: -5...5, using: &generator)), "rating": .double(1.5),
                            "zone": .null,
                        ])
            }
            let transactions: [Int64]? = Bool.random(using: &generator) ? nil : [3, 9]
            let direct = try JSONParser.parse(
                DeltaEncoder.sharedDelta(
                    transactions: transactions, sections: sections,
                    objects: objects.map {
                        DeltaEncoder.EncodedChange(
                            type: $0.type, indexPath: $0.indexPath, newIndexPath: $0.newIndexPath, id: $0.id,
                            object: $0.object.map(DeltaEncoder.bytes))
                    }))
            var expected: [String: JSONValue] = [
                "sections": try JSONCoding.encode(sections), "objects": try JSONCoding.encode(objects),
            ]
            if let transactions { expected["transactions"] = try JSONCoding.encode(transactions) }
            XCTAssertEqual(direct, .object(expected))
        }
    }
}
