import DepotPostgres
import Foundation
import XCTest

/// The password file's rules (no server needed).
final class PostgresPassfileTests: XCTestCase {
    func testTheFirstMatchingLineGivesThePasswordWithWildcardsAndEscapes() throws {
        let url = try PostgresURL("postgresql://depot@db.example:5433/store?schema=c1")
        let text = """
            # comment
            db.example:5432:store:depot:wrong-port
            db.example:5433:other:depot:wrong-database
            *:5433:store:depot:se\\:cr\\\\et
            *:*:*:*:fallback
            """
        XCTAssertEqual(PostgresPassfile.password(for: url, in: text), "se:cr\\et")
        XCTAssertEqual(PostgresPassfile.password(for: try PostgresURL("postgresql://x@h/d"), in: text), "fallback")
        XCTAssertNil(PostgresPassfile.password(for: url, in: "db.example:5433:store:someone:nope"))
    }

    func testAFileReadableByOthersIsIgnoredAsLibpqDoes() throws {
        let url = try PostgresURL("postgresql://depot@localhost/postgres")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("pgpass-\(UUID())")
        try "localhost:5432:postgres:depot:s3cret\n".write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        XCTAssertEqual(PostgresPassfile.password(for: url, environment: ["PGPASSFILE": file.path]), "s3cret")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file.path)
        XCTAssertNil(PostgresPassfile.password(for: url, environment: ["PGPASSFILE": file.path]))
    }
}
