import DepotClient
import DepotProtocol
import Foundation

/// The repository's `Tests/Fixtures` folder.
public enum Fixtures {
    /// The folder's location.
    public static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures")
    }

    /// The bytes of the fixture at `path`, relative to ``directory``.
    public static func bytes(_ path: String) throws -> [UInt8] {
        Array(try Data(contentsOf: directory.appendingPathComponent(path)))
    }
}

/// The World Cup model and teams from `Tests/Fixtures/worldcup.json`, and the Item entity tests use beside them.
public enum WorldCup {
    /// The whole fixture.
    public static var json: JSONValue { try! JSONParser.parse(Fixtures.bytes("worldcup.json")) }

    /// The model's entities (Team).
    public static var model: [EntityDescription] {
        try! JSONCoding.decode([EntityDescription].self, from: json["model"]!["entities"]!)
    }

    /// The teams' values, each with its `teamName`.
    public static var teams: [[String: JSONValue]] { json["teams"]!.arrayValue!.map { $0.objectValue! } }

    /// An Item entity (name, creation date, done flag) for tests beside the teams.
    public static var item: EntityDescription {
        EntityDescription(
            name: "Item",
            attributes: [
                AttributeDescription(name: "name", type: .string),
                AttributeDescription(name: "createdAt", type: .date),
                AttributeDescription(name: "done", type: .boolean, defaultValue: false),
            ])
    }
}

extension DepotConnection {
    /// Defines the World Cup model plus Item and inserts every team; returns their ids by name.
    @discardableResult
    public func loadWorldCup() async throws -> [String: String] {
        _ = try await call(ModelDefine.self, .init(entities: WorldCup.model + [WorldCup.item]))
        let inserts = WorldCup.teams.map {
            InsertedObject(entity: "Team", tempId: $0["teamName"]!.stringValue!, values: $0)
        }
        return try await call(StoreSave.self, .init(inserted: inserts)).ids
    }

    /// Defines the Item model alone and inserts `count` items named `item 000`, `item 001`…
    public func loadItems(_ count: Int) async throws {
        _ = try await call(ModelDefine.self, .init(entities: [WorldCup.item]))
        let items = (0..<count).map {
            InsertedObject(
                entity: "Item",
                values: ["name": .string(String(format: "item %03d", $0)), "createdAt": "2026-01-01T00:00:00.000Z"])
        }
        _ = try await call(StoreSave.self, .init(inserted: items))
    }
}
