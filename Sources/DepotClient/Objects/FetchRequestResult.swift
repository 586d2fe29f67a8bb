import DepotProtocol

/// A type that makes itself from a fetched object in its own way, like Core
/// Data's `NSFetchRequestResult`. You rarely need it: a
/// ``FetchedResultsController`` or ``AsynchronousFetchRequest`` hands out any
/// `Decodable` type, decoded from the object's values plus `id` (`"Team/42"`),
/// `entity` and `version`, dates from ISO 8601:
///
/// ```swift
/// struct Team: Decodable, Sendable {
///     var teamName: String
///     var wins: Int
/// }
/// let controller = FetchedResultsController<Team>(fetchRequest: request, connection: connection)
/// let id = controller.objectID(at: IndexPath(item: 0, section: 0))  // "Team/42", whatever Team declares
/// ```
///
/// Declare `var id: String` to get the object's id in your type, and conform
/// to `Identifiable` for ``FetchedResultsController/indexPath(forObject:)``.
/// Conform to this protocol (which implies `Identifiable` with a `String` id)
/// to build the value yourself; a `Decodable` conforming type gets the decoding above.
public protocol FetchRequestResult: Sendable, Identifiable where ID == String {
    /// Makes a result from a fetched object.
    init(depotObject: DepotObject) throws
}

extension FetchRequestResult where Self: Decodable {
    /// Decodes the result from the object's values (plus `id`, `entity`, `version`).
    public init(depotObject: DepotObject) throws {
        self = try depotObject.decode(Self.self)
    }
}

extension DepotObject: FetchRequestResult {
    /// The object itself.
    public init(depotObject: DepotObject) { self = depotObject }
}

extension DepotObject: Decodable {
    /// Reads an object from its wire form `{"id", "entity", "version", <values>}`.
    public init(from decoder: any Decoder) throws {
        let json = try JSONValue(from: decoder)
        do {
            try self.init(json: json)
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\(error)"))
        }
    }
}

extension Decodable where Self: Sendable {
    /// Makes a result from a fetched object: ``FetchRequestResult/init(depotObject:)``
    /// when the type has one, else decoding the object's wire form.
    static func make(from raw: DepotObject) throws -> Self {
        if Self.self == DepotObject.self { return raw as! Self }
        if let type = Self.self as? any FetchRequestResult.Type { return try type.init(depotObject: raw) as! Self }
        return try raw.decode(Self.self)
    }
}
