import DepotProtocol
import Foundation

/// One stored object as the client sees it: a dynamic record of the model's
/// values, like an `NSManagedObject` read through `value(forKey:)`.
///
/// ```swift
/// let team: DepotObject = controller.object(at: IndexPath(item: 0, section: 0))
/// print(team.string("teamName") ?? "?", team.int("wins") ?? 0)
/// ```
///
/// An object you get from an ``ObjectContext`` (fetched, inserted, or read
/// with ``ObjectContext/object(with:)``) belongs to that context, as a managed
/// object does: assigning through it (`team["wins"] = 42`,
/// `team.setValue(42, forKey: "wins")` or `team.values = ...`) records the
/// change in the context, and the next ``ObjectContext/save(mergePolicy:)``
/// writes it. Declare it with `var`; a `let` object does not compile when assigned.
///
/// An object from a ``FetchedResultsController`` or built with an initializer
/// belongs to no context (``managedObjectContext`` is `nil`): it is a plain
/// value. To change it in the store, hand it to a context with
/// ``ObjectContext/update(_:)``, or read it into one with ``ObjectContext/object(with:)``.
public struct DepotObject: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// The object's id, `Entity/rowid` (or a context's temporary id before the first save).
    public var id: String
    /// The entity's name.
    public var entity: String
    /// The version the values belong to; `nil` when the fetch named `properties`.
    public var version: Int64?
    /// Attribute values and to-one relationships (as ids), by key. Setting them
    /// on an object that belongs to a context records each changed key there.
    public var values: [String: JSONValue] {
        get { storage }
        set {
            if let context {
                for (key, value) in newValue where storage[key] != value { context.set(value, forKey: key, on: self) }
                for key in storage.keys where newValue[key] == nil { context.set(.null, forKey: key, on: self) }
            }
            storage = newValue
        }
    }
    var storage: [String: JSONValue]
    /// The context the object belongs to: assignments through the object are changes in it.
    var context: ObjectContext?
    /// Whether the values are not loaded (an object that was deleted before it was ever read).
    public var isFault: Bool

    /// Creates an object.
    public init(
        id: String, entity: String, version: Int64? = nil, values: [String: JSONValue] = [:], isFault: Bool = false
    ) {
        self.id = id
        self.entity = entity
        self.version = version
        self.storage = values
        self.isFault = isFault
        self.context = nil
    }

    /// Inserts a new object of `entityName` into `context`, like Core Data's
    /// `NSEntityDescription.insertNewObject(forEntityName:into:)`.
    ///
    /// ```swift
    /// var team = DepotObject.insertNewObject(forEntityName: "Team", into: context)
    /// team.setValue("Atlantis", forKey: "teamName")
    /// try await context.save()
    /// ```
    public static func insertNewObject(forEntityName entityName: String, into context: ObjectContext) -> DepotObject {
        context.insert(entity: entityName)
    }

    /// The context the object belongs to, like `NSManagedObject.managedObjectContext`;
    /// `nil` for an object from a controller or built by hand (a plain value).
    public var managedObjectContext: ObjectContext? { context }

    /// Whether the object was inserted and not saved yet (its id is temporary).
    public var isInserted: Bool { id.hasPrefix("temp-") }

    /// Two objects are equal when their id, entity, version, values and fault
    /// state are; the context they belong to does not count.
    public static func == (lhs: DepotObject, rhs: DepotObject) -> Bool {
        lhs.id == rhs.id && lhs.entity == rhs.entity && lhs.version == rhs.version && lhs.storage == rhs.storage
            && lhs.isFault == rhs.isFault
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(entity)
        hasher.combine(version)
        hasher.combine(storage)
        hasher.combine(isFault)
    }

    /// This object, belonging to `context`.
    func bound(to context: ObjectContext) -> DepotObject {
        var object = self
        object.context = context
        return object
    }

    /// This object, belonging to no context (how a context stores its own copies).
    var unbound: DepotObject {
        var object = self
        object.context = nil
        return object
    }

    /// Reads an object from its wire form `{"id", "entity", "version", <values>}`.
    public init(json: JSONValue) throws(DepotClientError) {
        guard var members = json.objectValue, let id = members.removeValue(forKey: "id")?.stringValue else {
            throw .invalidResponse("an object must be a JSON object with a string 'id': \(json.excerpt())")
        }
        let entity = members.removeValue(forKey: "entity")?.stringValue ?? Self.entity(ofID: id)
        let version = members.removeValue(forKey: "version")?.intValue
        self.init(id: id, entity: entity, version: version, values: members)
    }

    /// A fault: an object known only by its id.
    public static func fault(id: String) -> DepotObject {
        DepotObject(id: id, entity: entity(ofID: id), isFault: true)
    }

    /// The entity part of an id such as `Team/42`.
    public static func entity(ofID id: String) -> String {
        id.firstIndex(of: "/").map { String(id[..<$0]) } ?? id
    }

    /// The wire form.
    public var json: JSONValue {
        var members = values
        members["id"] = .string(id)
        members["entity"] = .string(entity)
        if let version { members["version"] = .int(version) }
        return .object(members)
    }

    /// The value for `key`, or `nil` when the object has none (not `.null`, which is a stored nil).
    /// Assigning records the change in the object's context (assigning `nil` stores `null`).
    public subscript(key: String) -> JSONValue? {
        get { storage[key] }
        set { setValue(newValue ?? .null, forKey: key) }
    }

    /// The value for `key`, like `NSManagedObject.value(forKey:)`.
    public func value(forKey key: String) -> JSONValue? { storage[key] }

    /// Sets the value for `key`, like `NSManagedObject.setValue(_:forKey:)`:
    /// on an object that belongs to a context, this is the change the next save writes.
    public mutating func setValue(_ value: JSONValue, forKey key: String) {
        context?.set(value, forKey: key, on: self)
        storage[key] = value
    }

    /// Sets the value for `key` from an ordinary Swift value (`Int`, `String`,
    /// `Double`, `Bool`, `Date`, `UUID`, optionals, arrays), like `NSManagedObject.setValue(_:forKey:)`.
    public mutating func setValue(_ value: some JSONValueConvertible, forKey key: String) {
        setValue(value.jsonValue, forKey: key)
    }

    /// The value for `key` as a string.
    public func string(_ key: String) -> String? { values[key]?.stringValue }
    /// The value for `key` as an integer.
    public func int(_ key: String) -> Int? { values[key]?.intValue.map { Int($0) } }
    /// The value for `key` as a 64-bit integer.
    public func int64(_ key: String) -> Int64? { values[key]?.intValue }
    /// The value for `key` as a double.
    public func double(_ key: String) -> Double? { values[key]?.doubleValue }
    /// The value for `key` as a boolean.
    public func bool(_ key: String) -> Bool? { values[key]?.boolValue }
    /// The value for `key` as a date (ISO 8601 on the wire).
    public func date(_ key: String) -> Date? { values[key]?.stringValue.flatMap(DepotDate.parse) }
    /// The value for `key` as a UUID.
    public func uuid(_ key: String) -> UUID? { values[key]?.stringValue.flatMap(UUID.init(uuidString:)) }
    /// The value for `key` as bytes (base64 on the wire).
    public func data(_ key: String) -> Data? { values[key]?.stringValue.flatMap { Data(base64Encoded: $0) } }
    /// The id of the object a to-one relationship `key` points to.
    public func objectID(_ key: String) -> String? { values[key]?.stringValue }

    /// The ids of the objects a to-many relationship `key` holds (one-to-many or
    /// many-to-many), like Core Data's `value(forKey:)` of a to-many set; `nil`
    /// when the object does not carry the key. A fetch carries to-many
    /// relationships only when its `properties` name them:
    ///
    /// ```swift
    /// let request = FetchRequest(entity: "Post", sortDescriptors: [SortDescriptor(key: "title")])
    /// var withTags = request
    /// withTags.properties = ["title", "tags"]
    /// let post = try await context.fetch(withTags)[0]
    /// print(post.objectIDs("tags") ?? [])       // ["Tag/1", "Tag/7"]
    /// ```
    public func objectIDs(_ key: String) -> [String]? {
        values[key]?.arrayValue.map { $0.compactMap(\.stringValue) }
    }

    /// The object a to-one relationship `key` points to, as the object's context holds it
    /// (a prefetched relationship, ``FetchRequest/relationshipKeyPathsForPrefetching``):
    /// no round trip. `nil` when it points nowhere or the context does not hold the object.
    public func relatedObject(_ key: String) -> DepotObject? {
        objectID(key).flatMap { context?.registeredObject(withID: $0) }
    }

    /// The objects a prefetched to-many relationship `key` holds, as the object's
    /// context holds them (no round trip); `nil` when the object does not carry the key.
    public func relatedObjects(_ key: String) -> [DepotObject]? {
        objectIDs(key).map { ids in ids.compactMap { context?.registeredObject(withID: $0) } }
    }

    /// Replaces the whole set of a to-many relationship `key` with the objects
    /// `ids` (permanent or temporary ids), like setting a Core Data to-many set.
    public mutating func setObjectIDs(_ ids: [String], forKey key: String) {
        setValue(.array(ids.map(JSONValue.string)), forKey: key)
    }

    /// Adds the objects `ids` to a to-many relationship `key`, like Core Data's
    /// generated `addToTags(_:)`. The save sends `{"add": [...]}`, which the daemon
    /// applies to the set as of the commit: concurrent adders from other processes
    /// lose nothing, and adding a member that is there changes nothing. The set
    /// the object carries (when it carries one) shows the change at once.
    public mutating func addObjectIDs(_ ids: [String], forKey key: String) {
        changeMembers(MemberChange(add: ids), forKey: key)
    }

    /// Removes the objects `ids` from a to-many relationship `key`, like Core
    /// Data's generated `removeFromTags(_:)`; the save sends `{"remove": [...]}`
    /// (see ``addObjectIDs(_:forKey:)``).
    public mutating func removeObjectIDs(_ ids: [String], forKey key: String) {
        changeMembers(MemberChange(remove: ids), forKey: key)
    }

    private mutating func changeMembers(_ change: MemberChange, forKey key: String) {
        if let context {
            context.changeMembers(change, forKey: key, on: self)
            if let members = storage[key]?.arrayValue { storage[key] = .array(change.applied(to: members)) }
            return
        }
        // A plain value keeps the change in the shape a save takes: the set, or `{add, remove}`.
        if let members = storage[key]?.arrayValue {
            storage[key] = .array(change.applied(to: members))
        } else {
            var pending = storage[key].flatMap(MemberChange.init(wire:)) ?? MemberChange()
            pending.merge(change)
            storage[key] = pending.wire
        }
    }

    /// Decodes the object as `T`: the values plus `id`, `entity` and `version`;
    /// dates are read from ISO 8601.
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        try Self.decode(T.self, from: json)
    }

    /// Decodes `json` (an object's or a dictionary's wire form) as `T`; dates are read from ISO 8601.
    static func decode<T: Decodable>(_ type: T.Type, from json: JSONValue) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = DepotDate.parse(text) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 date: \(text)"))
            }
            return date
        }
        return try decoder.decode(T.self, from: Data(JSONWriter.encode(json)))
    }

    public var description: String {
        "\(id) v\(version.map(String.init) ?? "?") \(JSONValue.object(values).excerpt(limit: 120))"
    }
}

extension Date: JSONValueConvertible {
    /// The wire form: an ISO 8601 string with milliseconds.
    public var jsonValue: JSONValue { .string(DepotDate.string(from: self)) }
}

extension UUID: JSONValueConvertible {
    /// The wire form: the UUID string.
    public var jsonValue: JSONValue { .string(uuidString) }
}

extension Data: JSONValueConvertible {
    /// The wire form: base64.
    public var jsonValue: JSONValue { .string(base64EncodedString()) }
}

/// Dates on the wire: ISO 8601 UTC with milliseconds, `2026-11-22T10:15:30.250Z`.
public enum DepotDate {
    /// Reads a wire date (with or without fractional seconds).
    public static func parse(_ text: String) -> Date? {
        if let date = parseWireForm(text) { return date }
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.f{1,3}]Z`, the form the daemon writes, read without a
    /// formatter (they cost microseconds a date, and a streamed fetch reads millions):
    /// the date nearest to the exact millisecond. Anything else is left to the formatter (so are
    /// years before 1583, where its calendar is Julian).
    private static func parseWireForm(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { parseWireForm(utf8: $0) }
    }

    /// ``parseWireForm(_:)`` from the text's UTF-8 bytes (a streamed object's, in place).
    static func parseWireForm(utf8 bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        guard bytes.count == 20 || (22...24).contains(bytes.count), bytes[bytes.count - 1] == UInt8(ascii: "Z"),
            bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":")
        else { return nil }
        func number(_ start: Int, _ count: Int) -> Int? {
            var value = 0
            for index in start..<start + count {
                let digit = bytes[index] &- 0x30
                guard digit < 10 else { return nil }
                value = value * 10 + Int(digit)
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
            let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
            year >= 1583, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year), hour < 24,
            minute < 60, second < 60
        else { return nil }
        var milliseconds = 0
        if bytes.count > 20 {
            let digits = bytes.count - 22
            guard bytes[19] == UInt8(ascii: "."), let fraction = number(20, digits + 1) else { return nil }
            milliseconds = fraction * (digits == 0 ? 100 : digits == 1 ? 10 : 1)
        } else if bytes[19] != UInt8(ascii: "Z") {
            return nil
        }
        let days = Int64(ISO8601.daysFromCivil(year: year, month: month, day: day))
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second)
        // Since 2001 in whole milliseconds, divided once: the double nearest the instant.
        let sinceReference = (seconds - 978_307_200) * 1000 + Int64(milliseconds)
        return Date(timeIntervalSinceReferenceDate: Double(sinceReference) / 1000)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// The wire form of `date`.
    public static func string(from date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}

/// Additions to and removals from a to-many relationship, as a save sends them (`{"add", "remove"}`).
struct MemberChange: Sendable, Hashable {
    /// Ids to add, in order, without repeats.
    var add: [String] = []
    /// Ids to remove, in order, without repeats.
    var remove: [String] = []

    init(add: [String] = [], remove: [String] = []) {
        merge(add: add, remove: remove)
    }

    /// Reads the wire form; `nil` for any other value.
    init?(wire: JSONValue) {
        guard let members = wire.objectValue, !members.isEmpty,
            Set(members.keys).isSubset(of: ["add", "remove"])
        else { return nil }
        self.init(
            add: members["add"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            remove: members["remove"]?.arrayValue?.compactMap(\.stringValue) ?? [])
    }

    var isEmpty: Bool { add.isEmpty && remove.isEmpty }

    /// The wire form: `{"add": [...], "remove": [...]}`, empty lists left out.
    var wire: JSONValue {
        var members: [String: JSONValue] = [:]
        if !add.isEmpty { members["add"] = .array(add.map(JSONValue.string)) }
        if !remove.isEmpty { members["remove"] = .array(remove.map(JSONValue.string)) }
        return .object(members)
    }

    /// Folds a later change in: the later word on an id wins.
    mutating func merge(_ later: MemberChange) { merge(add: later.add, remove: later.remove) }

    private mutating func merge(add added: [String], remove removed: [String]) {
        for id in added {
            remove.removeAll { $0 == id }
            if !add.contains(id) { add.append(id) }
        }
        for id in removed {
            add.removeAll { $0 == id }
            if !remove.contains(id) { remove.append(id) }
        }
    }

    /// The set `members` after the change (new members at the end).
    func applied(to members: [JSONValue]) -> [JSONValue] {
        var result = members.filter { member in !remove.contains { .string($0) == member } }
        for id in add where !result.contains(.string(id)) { result.append(.string(id)) }
        return result
    }
}
