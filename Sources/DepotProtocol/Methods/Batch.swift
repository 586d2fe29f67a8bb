/// What `store/batchInsert` does with an object that collides with a uniqueness constraint.
public enum ConflictResolution: String, Codable, Sendable, CaseIterable {
    /// Fail the whole batch with -32011 (the default).
    case error
    /// Update the existing object with the new values (find-or-create, upsert).
    case update
    /// Keep the existing object and skip the new one.
    case ignore
}

/// `store/batchInsert`: inserts many objects of one entity in one transaction.
public enum BatchInsert: Method {
    public static let name = "store/batchInsert"

    /// The objects.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The entity.
        public var entity: String
        /// Each object's values.
        public var objects: [[String: JSONValue]]
        /// What to do on a uniqueness collision.
        public var onConflict: ConflictResolution?
        /// Who made the change.
        public var author: String?
        /// A token for work-done `$/progress`.
        public var workDoneToken: JSONValue?

        /// Creates the params.
        public init(
            entity: String, objects: [[String: JSONValue]], onConflict: ConflictResolution? = nil,
            author: String? = nil, workDoneToken: JSONValue? = nil
        ) {
            self.entity = entity
            self.objects = objects
            self.onConflict = onConflict
            self.author = author
            self.workDoneToken = workDoneToken
        }
    }

    /// The params of a large request read without parsing `objects`: every
    /// other member decoded and checked as usual, and where the objects are,
    /// to be read one at a time with ``forEachObject(_:)`` (bounded memory
    /// for a million-object batch).
    public struct StreamedParameters: Sendable {
        /// The params with `objects` left empty.
        public let header: Parameters
        /// How many objects the array holds.
        public let count: Int
        private let bytes: [UInt8]
        private let objects: Range<Int>

        /// Reads `bytes[range]`, a params object.
        ///
        /// - Throws: -32700 for broken JSON, -32602 for a bad member (as the parsed path reports it).
        public init(bytes: [UInt8], range: Range<Int>) throws(RPCError) {
            var members: [String: JSONValue] = [:]
            var objects: (range: Range<Int>, elements: Int?)?
            do {
                try JSONStreamReader.read(bytes, range: range) { reader in
                    try reader.beginObject()
                    while let key = try reader.nextKey() {
                        if key == "objects" {
                            objects = try reader.skipValue()
                        } else {
                            members[key] = try reader.value()
                        }
                    }
                    try reader.end()
                }
            } catch let failure as JSONParser.Failure {
                throw RPCError(
                    code: .parseError, message: "parse error in params: \(failure)",
                    data: ["offset": .int(Int64(range.lowerBound + failure.offset))])
            } catch {
                throw RPCError.internalError("\(error)")
            }
            guard let objects, let count = objects.elements else {
                // Missing, or not an array: the ordinary decoding names the problem.
                members["objects"] = objects.map { _ in .string("not an array") }
                _ = try JSONCoding.decode(Parameters.self, from: .object(members), field: "params")
                throw RPCError.invalidParams("objects must be an array of objects", field: "params.objects")
            }
            members["objects"] = .array([])
            header = try JSONCoding.decode(Parameters.self, from: .object(members), field: "params")
            self.count = count
            self.bytes = bytes
            self.objects = (range.lowerBound + objects.range.lowerBound)..<(range.lowerBound + objects.range.upperBound)
        }

        /// Calls `body` with each object in order and its index, parsing one at a time.
        public func forEachObject(_ body: (Int, JSONValue) throws -> Void) throws {
            try forEachObject(reading: { _, _ in false }, body)
        }

        /// Calls `read` with each element's index and a reader positioned at
        /// it, so that the element can be read member by member without a
        /// ``JSONValue`` tree. When `read` returns `false` or throws a
        /// ``JSONParser/Failure``, the reader goes back to the element's start
        /// and `body` gets it parsed, as ``forEachObject(_:)`` gives it: what
        /// `read` does not take (a problem to report, broken JSON) is reported
        /// exactly as the generic path reports it. Any other error of `read`
        /// ends the reading.
        public func forEachObject(
            reading read: (Int, inout JSONStreamReader) throws -> Bool, _ body: (Int, JSONValue) throws -> Void
        ) throws {
            try JSONStreamReader.read(bytes, range: objects) { reader in
                try reader.beginArray()
                var index = 0
                while try reader.nextElement() {
                    let start = reader
                    let taken: Bool
                    do {
                        taken = try read(index, &reader)
                    } catch is JSONParser.Failure {
                        taken = false
                    }
                    if !taken {
                        reader = start
                        try body(index, try reader.value())
                    }
                    index += 1
                }
                try reader.end()
            }
        }
    }

    /// What the batch did.
    public struct Result: Codable, Hashable, Sendable {
        /// Objects inserted.
        public var inserted: Int
        /// Existing objects updated (`onConflict: update`).
        public var updated: Int
        /// Objects skipped (`onConflict: ignore`).
        public var ignored: Int
        /// The transaction's number; 0 when nothing changed.
        public var transaction: Int64

        /// Creates the result.
        public init(inserted: Int, updated: Int, ignored: Int, transaction: Int64) {
            self.inserted = inserted
            self.updated = updated
            self.ignored = ignored
            self.transaction = transaction
        }
    }
}

/// `store/batchUpdate`: sets values on every object matching a predicate, in one transaction.
public enum BatchUpdate: Method {
    public static let name = "store/batchUpdate"

    /// What to change.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The entity.
        public var entity: String
        /// Which objects; all when `nil`.
        public var predicate: String?
        /// The predicate's bindings.
        public var arguments: JSONValue?
        /// The new values.
        public var values: [String: JSONValue]
        /// Who made the change.
        public var author: String?
        /// A token for work-done `$/progress`.
        public var workDoneToken: JSONValue?

        /// Creates the params.
        public init(
            entity: String, predicate: String? = nil, arguments: JSONValue? = nil, values: [String: JSONValue],
            author: String? = nil, workDoneToken: JSONValue? = nil
        ) {
            self.entity = entity
            self.predicate = predicate
            self.arguments = arguments
            self.values = values
            self.author = author
            self.workDoneToken = workDoneToken
        }
    }

    /// What the batch did.
    public struct Result: Codable, Hashable, Sendable {
        /// Objects changed.
        public var count: Int
        /// The transaction's number; 0 when nothing changed.
        public var transaction: Int64

        /// Creates the result.
        public init(count: Int, transaction: Int64) {
            self.count = count
            self.transaction = transaction
        }
    }
}

/// `store/batchDelete`: deletes every object matching a predicate, in one transaction; delete rules apply.
public enum BatchDelete: Method {
    public static let name = "store/batchDelete"

    /// What to delete.
    public struct Parameters: Codable, Hashable, Sendable {
        /// The entity.
        public var entity: String
        /// Which objects; all when `nil`.
        public var predicate: String?
        /// The predicate's bindings.
        public var arguments: JSONValue?
        /// Who made the change.
        public var author: String?
        /// A token for work-done `$/progress`.
        public var workDoneToken: JSONValue?

        /// Creates the params.
        public init(
            entity: String, predicate: String? = nil, arguments: JSONValue? = nil, author: String? = nil,
            workDoneToken: JSONValue? = nil
        ) {
            self.entity = entity
            self.predicate = predicate
            self.arguments = arguments
            self.author = author
            self.workDoneToken = workDoneToken
        }
    }

    public typealias Result = BatchUpdate.Result
}
