// The wire types (FetchRequest, SortDescriptor, JSONValue, MergePolicy, the
// method types) are part of the client's API: `import DepotClient` is enough.
@_exported import DepotProtocol
