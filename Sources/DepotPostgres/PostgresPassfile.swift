import Foundation

/// PostgreSQL's password file (`~/.pgpass`, or the file `PGPASSFILE` names): lines of
/// `hostname:port:database:username:password`, `*` matching anything in the first four fields,
/// `\\:` and `\\\\` escaping, `#` starting a comment. libpq's rules, read without libpq.
public enum PostgresPassfile {
    /// The password the first matching line gives for `url`, if any.
    public static func password(for url: PostgresURL, in text: String) -> String? {
        for line in text.split(whereSeparator: \.isNewline) where !line.hasPrefix("#") {
            let fields = split(String(line))
            guard fields.count == 5 else { continue }
            let wanted = [url.host, String(url.port), url.database, url.username]
            if zip(fields.prefix(4), wanted).allSatisfy({ $0 == "*" || $0 == $1 }) { return fields[4] }
        }
        return nil
    }

    /// The password for `url` from `PGPASSFILE` or `~/.pgpass` in `environment`, if the file exists,
    /// is not readable by group or others (libpq ignores it otherwise), and has a matching line.
    public static func password(for url: PostgresURL, environment: [String: String]) -> String? {
        let path =
            environment["PGPASSFILE"]
            ?? environment["HOME"].map { URL(fileURLWithPath: $0).appendingPathComponent(".pgpass").path }
        guard let path, let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let mode = attributes[.posixPermissions] as? Int, mode & 0o077 == 0,
            let text = try? String(contentsOfFile: path, encoding: .utf8)
        else { return nil }
        return password(for: url, in: text)
    }

    /// The fields of one line, with `\:` and `\\` unescaped.
    private static func split(_ line: String) -> [String] {
        var fields: [String] = []
        var field = ""
        var escaped = false
        for character in line {
            if escaped {
                field.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == ":" {
                fields.append(field)
                field = ""
            } else {
                field.append(character)
            }
        }
        fields.append(field)
        return fields
    }
}
