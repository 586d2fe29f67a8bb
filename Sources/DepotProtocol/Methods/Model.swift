/// `model/define`: defines or migrates the model (DESIGN.md §4).
public enum ModelDefine: Method {
    public static let name = "model/define"

    /// The whole new model.
    public struct Parameters: Codable, Hashable, Sendable {
        /// Every entity of the model.
        public var entities: [EntityDescription]

        /// Creates the params.
        public init(entities: [EntityDescription]) { self.entities = entities }
    }

    /// What the definition changed.
    public struct Result: Codable, Hashable, Sendable {
        /// The model's version after the call; it grows when anything changed.
        public var version: Int64
        /// One line per change applied, e.g. `added entity Team`.
        public var changes: [String]

        /// Creates the result.
        public init(version: Int64, changes: [String]) {
            self.version = version
            self.changes = changes
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
