import DepotProtocol

/// The predicate tests' model: countries, teams, players and tags, with to-one, to-many and
/// many-to-many relationships and an attribute of every type on Team. FuzzPredicate uses it too.
public enum PredicateFixture {
    /// Country, Team, Player and Tag.
    public static let model: [EntityDescription] = [
        EntityDescription(
            name: "Country", attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [
                RelationshipDescription(name: "teams", destination: "Team", toMany: true, inverse: "country")
            ]),
        EntityDescription(
            name: "Team",
            attributes: [
                AttributeDescription(name: "teamName", type: .string),
                AttributeDescription(name: "zone", type: .string, optional: true),
                AttributeDescription(name: "wins", type: .integer, optional: true),
                AttributeDescription(name: "rating", type: .double, optional: true),
                AttributeDescription(name: "active", type: .boolean, defaultValue: true),
                AttributeDescription(name: "founded", type: .date, optional: true),
            ],
            relationships: [
                RelationshipDescription(name: "country", destination: "Country", inverse: "teams"),
                RelationshipDescription(
                    name: "players", destination: "Player", toMany: true, inverse: "team", deleteRule: .cascade),
                RelationshipDescription(name: "tags", destination: "Tag", toMany: true, inverse: "teams"),
            ]),
        EntityDescription(
            name: "Player",
            attributes: [
                AttributeDescription(name: "name", type: .string),
                AttributeDescription(name: "age", type: .integer, optional: true),
            ], relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")]),
        // Many-to-many: a team has many tags, a tag many teams.
        EntityDescription(
            name: "Tag",
            attributes: [
                AttributeDescription(name: "name", type: .string),
                AttributeDescription(name: "weight", type: .integer, optional: true),
            ],
            relationships: [RelationshipDescription(name: "teams", destination: "Team", toMany: true, inverse: "tags")]),
    ]
}

extension PredicateFixture {
    /// ``model`` with every string attribute `folded`: `[cd]` comparisons then read the shadow
    /// columns, and must match exactly what ``model`` matches.
    public static let foldedModel: [EntityDescription] = model.map { entity in
        var entity = entity
        for index in entity.attributes.indices where entity.attributes[index].type == .string {
            entity.attributes[index].folded = true
        }
        return entity
    }
}
