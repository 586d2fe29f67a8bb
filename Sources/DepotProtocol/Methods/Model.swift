/// `model/define`: defines or migrates the entities it names; the model's
/// other entities stay as they are (DESIGN.md §4).
public enum ModelDefine: Method {
    public static let name = "model/define"

    /// The entities to define or migrate.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The entities to define (new names) or migrate (existing names, or `renamedFrom`); all in one migration.
        public var entities: [EntityDescription]
        /// Entities to remove. Removal is not a lightweight migration: naming any is refused (-32016).
        public var remove: [String]?

        /// Creates the params.
        public init(entities: [EntityDescription]) { self.entities = entities }

        /// Creates the params with entities to remove (refused, -32016).
        public init(entities: [EntityDescription], remove: [String]?) {
            self.entities = entities
            self.remove = remove
        }
    }

    /// What the definition changed.
    public struct Result: Codable, Hashable, Sendable {
        /// The model's version after the call; it grows when anything changed.
        public var version: Int64
        /// One line per change applied, e.g. `added entity Team`.
        public var changes: [String]
        /// The transaction the migration is (DESIGN.md §7, Across a migration), when it changed
        /// a defined model, on a lone store and on a cluster alike; `nil` when nothing changed and
        /// for the first definition of an empty store.
        public var transaction: Int64?

        /// Creates the result.
        public init(version: Int64, changes: [String], transaction: Int64? = nil) {
            self.version = version
            self.changes = changes
            self.transaction = transaction
        }
    }
}

/// `model/get`: the current model.
public enum ModelGet: Method {
    public static let name = "model/get"
    public typealias Parameters = Empty

    /// The model and its version.
    public struct Result: Codable, Hashable, Sendable {
        /// The model's version (0 before any definition).
        public var version: Int64
        /// Every entity of the model.
        public var entities: [EntityDescription]

        /// Creates the result.
        public init(version: Int64, entities: [EntityDescription]) {
            self.version = version
            self.entities = entities
        }
    }
}
