import DepotProtocol

/// How `depot import` turns a source row into an object's values, checked against the entity.
struct ImportMapping {
    /// Source key to destination key; `nil` maps every key to itself.
    let renames: [(source: String, destination: String)]?
    /// The source keys that identify a row (find-or-create).
    let identity: [String]
    /// The entity the objects go to.
    let entity: EntityDescription

    /// Parses `--map src=dst,...` and `--identity a,b` and checks them against the entity.
    init(map: String?, identity: String, entity: EntityDescription) throws {
        self.entity = entity
        if let map {
            renames = try map.split(separator: ",").map { pair in
                let parts = pair.split(separator: "=", omittingEmptySubsequences: false).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw CLIError("bad --map entry '\(pair)': use source=destination")
                }
                return (parts[0], parts[1])
            }
        } else {
            renames = nil
        }
        self.identity = identity.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter {
            !$0.isEmpty
        }
        guard !self.identity.isEmpty else {
            throw CLIError("--identity needs at least one key, e.g. --identity name,version")
        }
        let known = Set(entity.attributes.map(\.name) + entity.relationships.filter { !$0.toMany }.map(\.name))
        for (source, destination) in renames ?? [] where !known.contains(destination) {
            throw CLIError(
                "--map \(source)=\(destination): \(entity.name) has no key '\(destination)' (it has: \(known.sorted().joined(separator: ", ")))"
            )
        }
        let identityDestinations = Set(self.identity.map { self.destination(of: $0) })
        for key in self.identity where !known.contains(destination(of: key)) {
            throw CLIError(
                "--identity \(key): \(entity.name) has no key '\(destination(of: key))'; map it with --map \(key)=KEY")
        }
        guard entity.uniquenessConstraints.contains(where: { Set($0) == identityDestinations }) else {
            throw CLIError(
                "find-or-create by (\(identityDestinations.sorted().joined(separator: ", "))) needs a uniqueness constraint on exactly those keys in \(entity.name); "
                    + "its constraints are \(entity.uniquenessConstraints.map { "(" + $0.joined(separator: ", ") + ")" }.joined(separator: " "))."
            )
        }
    }

    /// The destination key of a source key.
    func destination(of source: String) -> String {
        guard let renames else { return source }
        return renames.first { $0.source == source }?.destination ?? source
    }

    /// The values for one row, or why the row cannot be imported.
    func values(for row: JSONValue) -> Result<[String: JSONValue], RowProblem> {
        guard let members = row.objectValue else {
            return .failure(RowProblem("not an object: \(row.excerpt(limit: 40))"))
        }
        for key in identity where members[key] == nil || members[key]!.isNull {
            return .failure(RowProblem("missing identity field '\(key)'"))
        }
        var values: [String: JSONValue] = [:]
        var pairs = renames ?? members.keys.sorted().map { ($0, $0) }
        if let renames {
            pairs += identity.filter { key in !renames.contains { $0.source == key } }.map { ($0, $0) }
        }
        for (source, destination) in pairs {
            guard let value = members[source] else { continue }
            if let problem = check(value, for: destination, source: source) { return .failure(problem) }
            values[destination] = value
        }
        for attribute in entity.attributes
        where !attribute.optional && attribute.defaultValue == nil && values[attribute.name] == nil {
            return .failure(RowProblem("missing required field '\(attribute.name)'"))
        }
        return .success(values)
    }

    private func check(_ value: JSONValue, for key: String, source: String) -> RowProblem? {
        if let attribute = entity.attribute(named: key) {
            if value.isNull {
                return attribute.optional
                    ? nil : RowProblem("'\(source)' is null but \(entity.name).\(key) is required")
            }
            let fits: Bool
            switch attribute.type {
            case .string, .date, .uuid, .binary: fits = value.stringValue != nil
            case .integer: if case .int = value { fits = true } else { fits = false }
            case .double: fits = value.doubleValue != nil
            case .boolean: fits = value.boolValue != nil
            case .json: fits = true
            }
            return fits
                ? nil
                : RowProblem(
                    "'\(source)' should be \(attribute.type.rawValue) for \(entity.name).\(key), got \(value.typeName) \(value.excerpt(limit: 30))"
                )
        }
        if entity.relationship(named: key) == nil {
            return RowProblem("\(entity.name) has no key '\(key)'")
        }
        return value.isNull || value.stringValue != nil
            ? nil : RowProblem("'\(source)' should be an object id for \(entity.name).\(key), got \(value.typeName)")
    }
}

/// Why one row was not imported.
struct RowProblem: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}
