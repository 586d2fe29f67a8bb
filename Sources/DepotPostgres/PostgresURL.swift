import Foundation
import PostgresNIO

/// Where a PostgreSQL server is, parsed from `postgresql://USER[:PASSWORD]@HOST[:PORT][/DATABASE][?schema=NAME]`
/// (the form `scripts/postgres.sh url DIR` prints).
public struct PostgresURL: Sendable, Equatable {
    /// The server's host name or address.
    public var host: String
    /// The server's TCP port.
    public var port: Int
    /// The role to connect as.
    public var username: String
    /// The password, if the server asks for one (prefer `PGPASSWORD` to a password in the URL).
    public var password: String?
    /// The database to connect to.
    public var database: String
    /// The schema that holds Depot's tables (`depot` unless the URL's `schema` parameter names another).
    public var schema: String

    /// Parses `text`; the password defaults to `password` (e.g. the environment's `PGPASSWORD`).
    public init(_ text: String, password: String? = nil) throws(ChangeLogError) {
        guard let components = URLComponents(string: text),
            components.scheme == "postgresql" || components.scheme == "postgres",
            let host = components.host, !host.isEmpty,
            let username = components.user, !username.isEmpty
        else { throw .invalidURL(text) }
        self.host = host
        self.port = components.port ?? 5432
        self.username = username
        self.password = components.password ?? password
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.database = path.isEmpty ? username : path
        self.schema = components.queryItems?.first { $0.name == "schema" }?.value ?? "depot"
    }

    /// The configuration PostgresNIO connects with (no TLS: loopback and trusted networks only, for now).
    public var configuration: PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: .disable)
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }
}
