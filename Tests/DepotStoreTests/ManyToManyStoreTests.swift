import DepotProtocol
import Foundation
import XCTest

@testable import DepotStore

/// Many-to-many pairs survive migrations that rename either side (the join
/// table is renamed, or turned around when the other side now names it) and
/// a reopened store; a cardinality change is refused with nothing changed.
/// The `{add, remove}` form works on one-to-many relationships too.
final class ManyToManyStoreTests: XCTestCase {
    private func tags(_ store: Store, _ entity: String, _ key: String) throws -> [String: [String]] {
        let objects =
            try store.fetch(FetchRequest(entity: entity, properties: [key]), scope: .unrestricted).objects ?? []
        var result: [String: [String]] = [:]
        for object in objects {
            result[object["id"]!.stringValue!] = object[key]?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        return result
    }

    func testRenamesKeepThePairs() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-m2m-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("m.sqlite").path
        var store = try Store(path: path)
        let post = EntityDescription(
            name: "Post", attributes: [AttributeDescription(name: "title", type: .string)],
            relationships: [RelationshipDescription(name: "tags", destination: "Tag", toMany: true, inverse: "posts")])
        let tag = EntityDescription(
            name: "Tag", attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [RelationshipDescription(name: "posts", destination: "Post", toMany: true, inverse: "tags")])
        _ = try store.defineModel([post, tag])
        let (saved, _) = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(entity: "Tag", tempId: "a", values: ["name": "a"]),
                InsertedObject(entity: "Tag", tempId: "b", values: ["name": "b"]),
                InsertedObject(entity: "Post", tempId: "p", values: ["title": "p", "tags": ["a", "b"]]),
                InsertedObject(entity: "Post", tempId: "q", values: ["title": "q", "tags": ["b"]]),
            ]), writeScope: .unrestricted)
        let (a, b) = (saved.ids["a"]!, saved.ids["b"]!)
        let row = { (id: String) in String(id.split(separator: "/").last!) }
        XCTAssertEqual(try tags(store, "Post", "tags")[saved.ids["p"]!], [a, b])

        // Post -> Article: the other side's destination follows; the join table is renamed.
        var article = post
        article.name = "Article"
        article.renamedFrom = "Post"
        var changes = try store.defineModel([article]).changes
        XCTAssertEqual(changes, ["renamed entity Post to Article"])
        XCTAssertEqual(store.model().entities.first { $0.name == "Tag" }?.relationships[0].destination, "Article")
        var byArticle = try tags(store, "Article", "tags")
        XCTAssertEqual(byArticle["Article/" + row(saved.ids["p"]!)], [a, b])
        XCTAssertEqual(byArticle["Article/" + row(saved.ids["q"]!)], [b])

        // tags -> labels: the stored inverse follows.
        var labelled = article
        labelled.renamedFrom = nil
        labelled.relationships[0].name = "labels"
        labelled.relationships[0].renamedFrom = "tags"
        changes = try store.defineModel([labelled]).changes
        XCTAssertEqual(changes, ["renamed relationship Article.tags to labels"])
        XCTAssertEqual(store.model().entities.first { $0.name == "Tag" }?.relationships[0].inverse, "labels")

        // Article -> Zine: Tag.posts now names the table, so the pairs are turned around.
        var zine = labelled
        zine.name = "Zine"
        zine.renamedFrom = "Article"
        zine.relationships[0].renamedFrom = nil
        _ = try store.defineModel([zine])
        store = try Store(path: path)  // and it all reads back after reopening
        byArticle = try tags(store, "Zine", "labels")
        XCTAssertEqual(byArticle["Zine/" + row(saved.ids["p"]!)], [a, b])
        XCTAssertEqual(byArticle["Zine/" + row(saved.ids["q"]!)], [b])
        let byTag = try tags(store, "Tag", "posts")
        XCTAssertEqual(byTag[b], ["Zine/" + row(saved.ids["p"]!), "Zine/" + row(saved.ids["q"]!)])
        XCTAssertEqual(
            try store.count(FetchRequest(entity: "Zine", predicate: "ANY labels.name == 'a'"), scope: .unrestricted), 1)

        // One-to-many cannot become many-to-many in place: refused, nothing changed.
        let version = store.model().version
        let team = EntityDescription(
            name: "Team", attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [
                RelationshipDescription(name: "players", destination: "Player", toMany: true, inverse: "team")
            ])
        let player = EntityDescription(
            name: "Player", attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")])
        _ = try store.defineModel([team, player])
        var manyPlayers = player
        manyPlayers.relationships = [
            RelationshipDescription(name: "team", destination: "Team", toMany: true, inverse: "players")
        ]
        assertRPCError(.migrationRefused) { try store.defineModel([manyPlayers]) }
        XCTAssertEqual(store.model().version, version + 1)
        XCTAssertEqual(store.model().entities.first { $0.name == "Player" }, player)
    }

    func testAddAndRemoveOnOneToMany() throws {
        let (store, _) = try makeStore()
        let (saved, _) = try store.save(
            StoreSave.Parameters(inserted: [
                InsertedObject(
                    entity: "Team", tempId: "t", values: ["teamName": "Peru", "qualifyingZone": "CONMEBOL"]),
                InsertedObject(
                    entity: "Team", tempId: "u", values: ["teamName": "Chile", "qualifyingZone": "CONMEBOL"]),
                InsertedObject(entity: "Player", tempId: "a", values: ["name": "A", "team": "t"]),
                InsertedObject(entity: "Player", tempId: "b", values: ["name": "B", "team": "u"]),
                InsertedObject(entity: "Player", tempId: "c", values: ["name": "C"]),
            ]), writeScope: .unrestricted)
        let id = saved.ids
        let (_, transaction) = try store.save(
            StoreSave.Parameters(updated: [
                UpdatedObject(
                    id: id["t"]!,
                    values: [
                        "players": ["add": [.string(id["b"]!), .string(id["c"]!)], "remove": [.string(id["a"]!)]]
                    ])
            ]), writeScope: .unrestricted)
        XCTAssertEqual(try tags(store, "Team", "players")[id["t"]!], [id["b"]!, id["c"]!])
        XCTAssertEqual(try tags(store, "Team", "players")[id["u"]!], [])
        // Chile lost B: recorded with its key, as Peru and the three players are.
        XCTAssertEqual(transaction?.changes["Team"]?.updated.map(\.row).sorted(), [1, 2])
        XCTAssertEqual(Set(transaction?.changes["Player"]?.updated.map(\.row) ?? []), [1, 2, 3])
        let player = try store.objects(ids: [id["a"]!], scope: .unrestricted)[0]
        XCTAssertEqual(player["team"], .null)
    }
}
