import DepotProtocol

/// A type a ``FetchedResultsController`` can hand out, like Core Data's
/// `NSFetchRequestResult`: ``DepotObject`` itself, or your own `Decodable`
/// type made from one. Its `id` is the object's id.
///
/// ```swift
/// struct Team: Decodable, FetchRequestResult {
///     var id: String  // "Team/42"
///     var teamName: String
///     var wins: Int
/// }
/// let controller = FetchedResultsController<Team>(fetchRequest: request, connection: connection)
/// ```
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
