import DepotProtocol
import Foundation
import XCTest

@testable import DepotStore

/// Model names are looked up by their bytes (DESIGN.md §4): `\u{212A}` (the Kelvin sign) is
/// canonically equivalent to `K`, so Swift's `String`-keyed dictionaries found the attribute
/// `Kind` and the relationship `Keeper` under `\u{212A}ind` and `\u{212A}eeper`; to the store
/// they are unknown keys, in a schema lookup, a predicate, a sort and a save.
final class NameTableTests: XCTestCase {
    func testLookAlikeNamesAreUnknownKeys() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-names-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("depot.sqlite").path)
        _ = try store.defineModel([
            EntityDescription(
                name: "Key", attributes: [AttributeDescription(name: "Kind", type: .string)],
                relationships: [RelationshipDescription(name: "Keeper", destination: "Key")])
        ])
        let lookAlike = "\u{212A}ind"
        XCTAssertEqual(lookAlike, "Kind", "the premise: Swift's String == is canonical equivalence")
        let entity = try XCTUnwrap(store.schema.entity(named: "Key"))
        XCTAssertNotNil(entity.attributes["Kind"])
        XCTAssertNil(entity.attributes[lookAlike])
        XCTAssertNil(entity.toOne["\u{212A}eeper"])
        XCTAssertFalse(entity.hasKey(lookAlike))
        XCTAssertEqual(entity.attributes.count, 1)
        XCTAssertEqual(entity.toOne.map(\.key), ["Keeper"])

        _ = try store.save(
            StoreSave.Parameters(inserted: [InsertedObject(entity: "Key", values: ["Kind": "a"])]),
            writeScope: .unrestricted)
        for request in [
            FetchRequest(entity: "Key", predicate: "\(lookAlike) == 'a'"),
            FetchRequest(entity: "Key", sort: [SortDescriptor(key: lookAlike)]),
            FetchRequest(entity: "Key", properties: [lookAlike]),
        ] {
            XCTAssertThrowsError(try store.fetch(request, scope: .unrestricted), "\(request)")
        }
        XCTAssertThrowsError(
            try store.save(
                StoreSave.Parameters(inserted: [InsertedObject(entity: "Key", values: [lookAlike: "b"])]),
                writeScope: .unrestricted))
        XCTAssertEqual(try store.fetch(FetchRequest(entity: "Key"), scope: .unrestricted).objects?.count, 1)
    }
}
