import DepotProtocol
import DepotTestSupport
import Foundation
import GRDB
import XCTest

@testable import DepotStore

/// The `folded` attribute option: a shadow column holding the value folded for `[cd]`, kept
/// right by every write and by migrations, and read by `[cd]` comparisons.
final class FoldedAttributeTests: XCTestCase {
    private static func model(folded: Bool, name: String = "title", renamedFrom: String? = nil) -> [EntityDescription] {
        [
            EntityDescription(
                name: "Item",
                attributes: [
                    AttributeDescription(
                        name: name, type: .string, optional: true, folded: folded, renamedFrom: renamedFrom),
                    AttributeDescription(name: "rank", type: .integer, defaultValue: 0),
                ])
        ]
    }

    private static let titles: [JSONValue] = [
        "Étoile Rouge", "ETOILE", "straße", "Crème brûlée", "日本", "", .null, "ÉCOLE", "ecole", "Ǆemal",
    ]

    private func makeFoldedStore(folded: Bool = true) throws -> Store {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-folded-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("f.sqlite").path)
        _ = try store.defineModel(Self.model(folded: folded))
        return store
    }

    /// Every row's shadow column, checked against the Swift fold of its value.
    private func assertShadowColumnsRight(
        _ store: Store, key: String = "title", file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let rows = try store.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT \(EntitySchema.quote(key)) AS v, \(EntitySchema.quote(key + "#folded")) AS f FROM e_Item")
        }
        XCTAssertFalse(rows.isEmpty, file: file, line: line)
        for row in rows {
            let value: String? = row["v"]
            let folded: String? = row["f"]
            XCTAssertEqual(
                folded, value.map { PredicateText.fold($0, 3) }, "for \(value ?? "nil")", file: file, line: line)
        }
    }

    private func ids(_ store: Store, _ predicate: String) throws -> [String] {
        try store.fetch(
            FetchRequest(entity: "Item", predicate: predicate, sort: [SortDescriptor(key: "rank")], resultType: .ids),
            scope: .unrestricted
        )
        .ids ?? []
    }

    func testEveryWritePathKeepsTheShadowColumnRight() throws {
        let store = try makeFoldedStore()
        let inserted = Self.titles.enumerated().map { index, title in
            InsertedObject(entity: "Item", tempId: "i\(index)", values: ["title": title, "rank": .int(Int64(index))])
        }
        let (saved, _) = try store.save(StoreSave.Parameters(inserted: inserted), writeScope: .unrestricted)
        try assertShadowColumnsRight(store)
        _ = try store.save(
            StoreSave.Parameters(updated: [
                UpdatedObject(id: try XCTUnwrap(saved.ids["i0"]), values: ["title": "Ünïcode"])
            ]), writeScope: .unrestricted)
        try assertShadowColumnsRight(store)
        _ = try store.batchInsert(
            BatchInsert.Parameters(
                entity: "Item", objects: Self.titles.map { ["title": $0, "rank": 100] }), writeScope: .unrestricted)
        try assertShadowColumnsRight(store)
        _ = try store.batchUpdate(
            BatchUpdate.Parameters(entity: "Item", predicate: "rank == 100", values: ["title": "Ça Va"]),
            readScope: .unrestricted, writeScope: .unrestricted)
        try assertShadowColumnsRight(store)
        XCTAssertEqual(try ids(store, "title ==[cd] 'ca va'").count, Self.titles.count)
        XCTAssertEqual(try ids(store, "title BEGINSWITH[cd] 'unic'").count, 1)
    }

    func testCDComparisonsReadTheShadowColumnAndItsIndex() throws {
        let store = try makeFoldedStore()
        let entity = try store.schema.entity("Item")
        let contains = try PredicateCompilation.whereClause(
            predicate: "title CONTAINS[cd] 'ÉTOI'", arguments: nil, entity: entity, schema: store.schema)
        XCTAssertTrue(contains.sql.contains("\"title#folded\""), contains.sql)
        XCTAssertFalse(contains.sql.contains("depot_fold"), "nothing folded per row: \(contains.sql)")
        XCTAssertEqual(contains.arguments, ["etoi".databaseValue], "the value is folded once, in Swift")
        // [c] alone folds as it reads.
        let caseOnly = try PredicateCompilation.whereClause(
            predicate: "title CONTAINS[c] 'x'", arguments: nil, entity: entity, schema: store.schema
        ).sql
        XCTAssertFalse(caseOnly.contains("#folded"), caseOnly)
        for predicate in ["title BEGINSWITH[cd] 'Éto'", "title ==[cd] 'ecole'"] {
            let condition = try PredicateCompilation.whereClause(
                predicate: predicate, arguments: nil, entity: entity, schema: store.schema)
            let plan = try store.read { db in
                try Row.fetchAll(
                    db, sql: "EXPLAIN QUERY PLAN SELECT t0.id FROM e_Item AS t0 WHERE \(condition.sql)",
                    arguments: StatementArguments(condition.arguments)
                ).map { $0["detail"] as String? ?? "" }.joined(separator: "; ")
            }
            XCTAssertTrue(plan.contains("f_Item_title"), "\(predicate): \(plan)")
        }
    }

    func testAMigrationFillsDropsAndRenamesTheShadowColumn() throws {
        let store = try makeFoldedStore(folded: false)
        _ = try store.save(
            StoreSave.Parameters(
                inserted: Self.titles.enumerated().map { index, title in
                    InsertedObject(
                        entity: "Item", tempId: "i\(index)", values: ["title": title, "rank": .int(Int64(index))])
                }), writeScope: .unrestricted)
        let before = try ids(store, "title CONTAINS[cd] 'ECO' OR title BEGINSWITH[cd] 'etoile'")
        XCTAssertEqual(before.count, 4)

        let folding = try store.defineModel(Self.model(folded: true))
        XCTAssertTrue(folding.changes.contains("folded attribute Item.title"), "\(folding.changes)")
        try assertShadowColumnsRight(store)
        XCTAssertEqual(try ids(store, "title CONTAINS[cd] 'ECO' OR title BEGINSWITH[cd] 'etoile'"), before)
        XCTAssertEqual(try store.model().entities[0].attributes[0].folded, true)

        let renaming = try store.defineModel(Self.model(folded: true, name: "heading", renamedFrom: "title"))
        XCTAssertTrue(renaming.changes.contains("renamed attribute Item.title to heading"), "\(renaming.changes)")
        try assertShadowColumnsRight(store, key: "heading")
        XCTAssertEqual(try ids(store, "heading CONTAINS[cd] 'ECO' OR heading BEGINSWITH[cd] 'etoile'"), before)

        let unfolding = try store.defineModel(Self.model(folded: false, name: "heading"))
        XCTAssertTrue(unfolding.changes.contains("unfolded attribute Item.heading"), "\(unfolding.changes)")
        let (columns, indexes) = try store.read { db in
            (
                try db.columns(in: "e_Item").map(\.name),
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'f_%'")
            )
        }
        XCTAssertEqual(columns, ["id", "_version", "heading", "rank"])
        XCTAssertEqual(indexes, [])
        XCTAssertEqual(try ids(store, "heading CONTAINS[cd] 'ECO' OR heading BEGINSWITH[cd] 'etoile'"), before)
        let unchanged = try store.defineModel(Self.model(folded: false, name: "heading"))
        XCTAssertEqual(unchanged.changes, [])
    }

    func testARenamedEntityKeepsItsShadowColumnRight() throws {
        let store = try makeFoldedStore()
        _ = try store.save(
            StoreSave.Parameters(inserted: [InsertedObject(entity: "Item", values: ["title": "Été"])]),
            writeScope: .unrestricted)
        var renamed = Self.model(folded: true)
        renamed[0].name = "Entry"
        renamed[0].renamedFrom = "Item"
        _ = try store.defineModel(renamed)
        let (saved, _) = try store.save(
            StoreSave.Parameters(inserted: [InsertedObject(entity: "Entry", tempId: "e", values: ["title": "Ünï"])]),
            writeScope: .unrestricted)
        _ = try store.save(
            StoreSave.Parameters(updated: [UpdatedObject(id: try XCTUnwrap(saved.ids["e"]), values: ["title": "ÀÉ"])]),
            writeScope: .unrestricted)
        let rows = try store.read { db in
            try Row.fetchAll(db, sql: "SELECT title, \"title#folded\" FROM e_Entry ORDER BY id").map {
                [$0[0] as String, $0[1] as String]
            }
        }
        XCTAssertEqual(rows, [["Été", "ete"], ["ÀÉ", "ae"]])
        let triggers = try store.read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        }
        XCTAssertEqual(triggers, ["f_Entry_title_insert", "f_Entry_title_update"])
    }

    func testFoldedNeedsAStringAttribute() throws {
        let store = try makeFoldedStore()
        var model = Self.model(folded: true)
        model[0].attributes[1].folded = true
        let error = assertRPCError(.invalidParams) { try store.defineModel(model) }
        XCTAssertEqual(error?.data?["field"], "entities[0].attributes[1].folded")
    }

    func testTheOptionIsOnTheWireOnlyWhenSet() throws {
        let plain = try JSONEncoder().encode(AttributeDescription(name: "a", type: .string))
        XCTAssertFalse(String(decoding: plain, as: UTF8.self).contains("folded"))
        let folded = try JSONEncoder().encode(AttributeDescription(name: "a", type: .string, folded: true))
        let decoded = try JSONDecoder().decode(AttributeDescription.self, from: folded)
        XCTAssertTrue(decoded.folded)
    }
}
