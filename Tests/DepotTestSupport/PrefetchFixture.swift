import DepotProtocol
import Foundation

/// A league model for prefetch tests (DESIGN.md §5, §7): to-one chains
/// (`Match.homeTeam.coach`), to-many (`Team.players`, cascade) and many-to-many
/// (`Team.tags`), with the delete rules cascade, nullify and deny.
public enum PrefetchFixture {
    /// The model, as `model/define` takes it.
    public static let model = #"""
        {"entities": [
          {"name": "Coach", "attributes": [{"name": "name", "type": "string"}],
           "relationships": [{"name": "teams", "destination": "Team", "toMany": true, "inverse": "coach", "deleteRule": "deny"}]},
          {"name": "Team", "attributes": [{"name": "teamName", "type": "string"}, {"name": "zone", "type": "string"}],
           "relationships": [
             {"name": "coach", "destination": "Coach", "inverse": "teams"},
             {"name": "players", "destination": "Player", "toMany": true, "inverse": "team", "deleteRule": "cascade"},
             {"name": "tags", "destination": "Tag", "toMany": true, "inverse": "teams"},
             {"name": "homeMatches", "destination": "Match", "toMany": true, "inverse": "homeTeam"},
             {"name": "awayMatches", "destination": "Match", "toMany": true, "inverse": "awayTeam"}]},
          {"name": "Player", "attributes": [{"name": "name", "type": "string"}],
           "relationships": [{"name": "team", "destination": "Team", "inverse": "players"}]},
          {"name": "Tag", "attributes": [{"name": "label", "type": "string"}],
           "relationships": [{"name": "teams", "destination": "Team", "toMany": true, "inverse": "tags"}]},
          {"name": "Match", "attributes": [{"name": "round", "type": "string"}, {"name": "score", "type": "integer"}],
           "relationships": [
             {"name": "homeTeam", "destination": "Team", "inverse": "homeMatches"},
             {"name": "awayTeam", "destination": "Team", "inverse": "awayMatches"}]}
        ]}
        """#

    /// The model as entity descriptions.
    public static var entities: [EntityDescription] {
        struct Model: Decodable { var entities: [EntityDescription] }
        // The literal above is valid: a failure here is a broken fixture.
        return try! JSONDecoder().decode(Model.self, from: Data(model.utf8)).entities
    }

    /// Every object of the store by id, each with all of its keys (to-many ones included).
    public typealias Graph = [String: [String: JSONValue]]

    /// The ids `paths` reach from `rows` in `graph`, walking only through objects
    /// `visible` says the key may read (all, when `nil`): what `related` must hold.
    public static func reached(
        from rows: [[String: JSONValue]], paths: [String], graph: Graph, visible: ((String) -> Bool)? = nil
    ) -> Set<String> {
        var reached: Set<String> = []
        for path in paths {
            var level = rows
            for key in path.split(separator: ".").map(String.init) {
                var next: [[String: JSONValue]] = []
                for object in level {
                    let targets: [String]
                    switch object[key] {
                    case .string(let id)?: targets = [id]
                    case .array(let ids)?: targets = ids.compactMap(\.stringValue)
                    default: targets = []
                    }
                    for id in targets where visible?(id) ?? true {
                        guard let target = graph[id] else { continue }
                        reached.insert(id)
                        next.append(target)
                    }
                }
                level = next
            }
        }
        return reached
    }
}
