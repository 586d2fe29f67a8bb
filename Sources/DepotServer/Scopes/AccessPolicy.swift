import DepotProtocol
import Foundation

/// The `--policy FILE` (DESIGN.md §2, Row-level scopes): roles that carry, per
/// entity, a read and a write predicate, on top of a plain ``Role``.
///
/// `{"roles": {"<role>": {"base": "read"|"write"|"admin", "entities": {"<Entity>": {"read": "<predicate>", "write": "<predicate>"}}}}}`
public struct AccessPolicy: Sendable, Hashable {
    /// One entity's rules: predicate texts, `nil` for unrestricted.
    public struct EntityRules: Sendable, Hashable {
        /// The read scope's text.
        public var read: String?
        /// The write scope's text.
        public var write: String?
    }

    /// One role of the policy.
    public struct ScopedRole: Sendable, Hashable {
        /// The plain role whose methods it may call.
        public var base: Role
        /// The rules by entity name; an entity not listed is unrestricted.
        public var entities: [String: EntityRules]
    }

    /// The roles by name.
    public var roles: [String: ScopedRole]

    /// An empty policy: every key keeps its plain role.
    public init() { roles = [:] }

    /// Parses the policy's JSON; throws naming the place and what is wrong.
    public init(parsing text: String, source: String) throws(ConfigurationError) {
        let json: JSONValue
        do {
            json = try JSONParser.parse(text)
        } catch {
            throw ConfigurationError(description: "\(source): not JSON (\(error))")
        }
        guard case .object(let top) = json, case .object(let roleMembers)? = top["roles"] else {
            throw ConfigurationError(description: "\(source): expected {\"roles\": {\"<role>\": {...}}}")
        }
        if let extra = top.keys.first(where: { $0 != "roles" }) {
            throw ConfigurationError(description: "\(source): unknown key '\(extra)' (only \"roles\")")
        }
        var roles: [String: ScopedRole] = [:]
        for (name, value) in roleMembers {
            let place = "\(source): roles.\(name)"
            guard !name.isEmpty, !name.contains(where: \.isWhitespace) else {
                throw ConfigurationError(description: "\(place): a role name is one word")
            }
            guard case .object(let members) = value else {
                throw ConfigurationError(description: "\(place): expected an object with base and entities")
            }
            if let extra = members.keys.first(where: { $0 != "base" && $0 != "entities" }) {
                throw ConfigurationError(description: "\(place): unknown key '\(extra)' (base, entities)")
            }
            guard case .string(let baseText)? = members["base"], let base = Role(rawValue: baseText) else {
                throw ConfigurationError(description: "\(place).base: expected \"read\", \"write\" or \"admin\"")
            }
            var entities: [String: EntityRules] = [:]
            switch members["entities"] {
            case nil: break
            case .object(let entityMembers)?:
                for (entity, rulesValue) in entityMembers {
                    guard case .object(let rules) = rulesValue else {
                        throw ConfigurationError(
                            description: "\(place).entities.\(entity): expected {\"read\": ..., \"write\": ...}")
                    }
                    var parsed = EntityRules()
                    for (key, rule) in rules {
                        guard case .string(let predicate) = rule else {
                            throw ConfigurationError(
                                description: "\(place).entities.\(entity).\(key): expected a predicate string")
                        }
                        switch key {
                        case "read": parsed.read = predicate
                        case "write": parsed.write = predicate
                        default:
                            throw ConfigurationError(
                                description: "\(place).entities.\(entity): unknown key '\(key)' (read, write)")
                        }
                    }
                    entities[entity] = parsed
                }
            case .some:
                throw ConfigurationError(description: "\(place).entities: expected an object by entity name")
            }
            roles[name] = ScopedRole(base: base, entities: entities)
        }
        self.roles = roles
    }

    /// Reads and parses `path`.
    public init(contentsOf path: String) throws(ConfigurationError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = access(path, R_OK) == 0 ? "not a readable file" : String(cString: strerror(errno))
            throw ConfigurationError(description: "cannot read the policy file \(path): \(reason)")
        }
        try self.init(parsing: String(decoding: data, as: UTF8.self), source: path)
    }
}
