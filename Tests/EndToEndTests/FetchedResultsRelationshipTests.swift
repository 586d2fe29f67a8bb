import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Predicates and sort keys that cross relationships: a change to a related
/// object re-evaluates exactly the objects it reaches, and the oracle holds.
final class FetchedResultsRelationshipTests: XCTestCase {
    func testChangesToRelatedObjectsMoveAndFilter() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(
            ModelDefine.self,
            .init(entities: [
                EntityDescription(
                    name: "Country", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [
                        RelationshipDescription(name: "teams", destination: "Team", toMany: true, inverse: "country")
                    ]),
                EntityDescription(
                    name: "Team", attributes: [AttributeDescription(name: "teamName", type: .string)],
                    relationships: [
                        RelationshipDescription(name: "country", destination: "Country", inverse: "teams"),
                        RelationshipDescription(
                            name: "players", destination: "Player", toMany: true, inverse: "team", deleteRule: .cascade),
                    ]),
                EntityDescription(
                    name: "Player",
                    attributes: [
                        AttributeDescription(name: "name", type: .string),
                        AttributeDescription(name: "age", type: .integer),
                    ],
                    relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")]),
            ]))
        let saved = try await client.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Country", tempId: "fr", values: ["name": "France"]),
                InsertedObject(entity: "Country", tempId: "br", values: ["name": "Brazil"]),
                InsertedObject(entity: "Team", tempId: "a", values: ["teamName": "Bleus", "country": "fr"]),
                InsertedObject(entity: "Team", tempId: "b", values: ["teamName": "Seleção", "country": "br"]),
                InsertedObject(entity: "Team", tempId: "c", values: ["teamName": "Olympique", "country": "fr"]),
                InsertedObject(entity: "Player", tempId: "p1", values: ["name": "Zidane", "age": 30, "team": "a"]),
                InsertedObject(entity: "Player", tempId: "p2", values: ["name": "Ronaldo", "age": 25, "team": "b"]),
                InsertedObject(entity: "Player", tempId: "p3", values: ["name": "Papin", "age": 28, "team": "c"]),
            ]))
        let ids = saved.ids
        let collector = ChangeCollector(client)
        let veterans = FetchRequest(
            entity: "Team", predicate: "ANY players.age > 29", sort: [SortDescriptor(key: "teamName")])
        let byCountry = FetchRequest(
            entity: "Team", sort: [SortDescriptor(key: "country.name"), SortDescriptor(key: "teamName")])
        let playersByCountry = FetchRequest(
            entity: "Player", predicate: "team.country.name BEGINSWITH[cd] 'f'",
            sort: [SortDescriptor(key: "team.teamName"), SortDescriptor(key: "name")])
        var mirrors: [ResultsMirror] = []
        for (request, section) in [(veterans, nil), (byCountry, "country.name"), (playersByCountry, nil)]
            as [(FetchRequest, String?)]
        {
            let result = try await client.call(
                ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
            mirrors.append(ResultsMirror(result, request: request, sectionKeyPath: section))
            try await mirrors.last!.assertMatchesFreshFetch(client)
        }
        let edits: [StoreSave.Parameters] = [
            .init(updated: [UpdatedObject(id: ids["p2"]!, values: ["age": 31])]),  // Seleção gains a veteran
            .init(updated: [UpdatedObject(id: ids["br"]!, values: ["name": "Argentina"])]),  // sort key through country moves Seleção
            .init(updated: [UpdatedObject(id: ids["fr"]!, values: ["name": "Gaule"])]),  // two teams move, no players leave (still F? no: G)
            .init(updated: [UpdatedObject(id: ids["p1"]!, values: ["team": .string(ids["c"]!)])]),  // Zidane changes team
            .init(deleted: [DeletedObject(id: ids["p1"]!)]),
            .init(updated: [UpdatedObject(id: ids["c"]!, values: ["country": .string(ids["br"]!)])]),
            .init(updated: [UpdatedObject(id: ids["fr"]!, values: ["name": "France"])]),
            .init(inserted: [
                InsertedObject(entity: "Player", values: ["name": "Platini", "age": 33, "team": .string(ids["a"]!)])
            ]),
        ]
        for (number, edit) in edits.enumerated() {
            let result = try await client.call(StoreSave.self, edit)
            for index in mirrors.indices {
                if try await mirrors[index].matchesFreshFetch(client) { continue }
                let change = try await collector.expect(for: mirrors[index].subscription)
                XCTAssertEqual(change.transaction, result.transaction)
                mirrors[index].apply(change)
                try await mirrors[index].assertMatchesFreshFetch(client)
            }
        }
        XCTAssertGreaterThanOrEqual(mirrors.map(\.seq).reduce(0, +), 8)
    }
}
