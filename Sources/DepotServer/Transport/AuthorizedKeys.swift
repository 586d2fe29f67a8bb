import DepotProtocol
import DepotStore
import Foundation
import Synchronization
import ZeroMQ

/// What a client key may do (DESIGN.md §2).
public enum Role: String, Sendable, CaseIterable, Comparable {
    /// Fetch, count, get, `results/*` but `deleteCache`, observe, history, `model/get`, ping.
    case read
    /// `read`, plus saves and batch operations.
    case write
    /// Everything: `write`, plus `model/define`, `results/deleteCache` and any other method.
    case admin

    private var rank: Int {
        switch self {
        case .read: 0
        case .write: 1
        case .admin: 2
        }
    }

    public static func < (lhs: Role, rhs: Role) -> Bool { lhs.rank < rhs.rank }

    /// Methods every role may call.
    static let readMethods: Set<String> = [
        Initialize.name, Ping.name, Disconnect.name, CancelRequest.name,
        ModelGet.name, StoreFetch.name, StoreCount.name, StoreGet.name, StoreObserve.name, StoreUnobserve.name,
        StoreHistory.name, ResultsSubscribe.name, ResultsObjects.name, ResultsSnapshot.name, ResultsUnsubscribe.name,
    ]

    /// Methods `write` adds.
    static let writeMethods: Set<String> = [
        StoreSave.name, BatchInsert.name, BatchUpdate.name, BatchDelete.name,
    ]

    /// The least role that may call `method`: methods not listed (`model/define`,
    /// `results/deleteCache`, and any added later) need `admin`.
    public static func required(for method: String) -> Role {
        if readMethods.contains(method) { return .read }
        if writeMethods.contains(method) { return .write }
        return .admin
    }

    /// Whether this role may call `method`.
    public func allows(_ method: String) -> Bool { self >= Role.required(for: method) }
}

/// One line of the authorized-keys file.
public struct AuthorizedKey: Sendable, Hashable {
    /// The client's public key, Z85.
    public var publicKey: String
    /// What it may do.
    public var role: Role
    /// A name for logs and `server/stats`; the key's first 8 characters when the line gives none.
    public var name: String
    /// The role as the line names it: a plain role, or one of the policy's.
    public var roleName: String = ""
    /// The line's `attr=value` words, bound as `$attr` in its role's scopes.
    public var attributes: [String: String] = [:]
    /// The row-level scope of its policy role (DESIGN.md §2); `nil` when the role has none.
    public var scope: KeyScope? = nil
}

/// The authorized-keys file: `<Z85 public key> <role> [name] [attr=value ...]` per
/// line, `#` comments; a role is `read`, `write`, `admin` or one of the policy's roles.
public struct AuthorizedKeys: Sendable {
    /// The keys, by public key.
    public var keys: [String: AuthorizedKey]

    /// Parses the file's text; throws naming the line and what is wrong with it.
    ///
    /// A key whose role is one of `policy`'s gets that role's base and its
    /// scope, bound for the key's name and attributes (and checked against
    /// `schema` when given): a rule that does not parse, or names a variable
    /// the line does not give, fails the whole file.
    public init(
        parsing text: String, source: String, policy: AccessPolicy = AccessPolicy(), schema: Schema? = nil
    ) throws(ConfigurationError) {
        var keys: [String: AuthorizedKey] = [:]
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            // Z85 keys may contain `#`: a comment is a word that starts with `#` where no key is expected.
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            var words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            if let first = words.first, first.hasPrefix("#"), !Curve.isZ85Key(first) { continue }
            if let comment = words.indices.dropFirst().first(where: { words[$0].hasPrefix("#") }) {
                words.removeSubrange(comment...)
            }
            guard !words.isEmpty else { continue }
            let place = "\(source):\(index + 1)"
            guard words.count >= 2 else {
                throw ConfigurationError(
                    description: "\(place): expected '<Z85 public key> <role> [name]', got '\(line)'")
            }
            guard Curve.isZ85Key(words[0]) else {
                throw ConfigurationError(
                    description: "\(place): '\(words[0])' is not a Z85 public key (40 characters, as in NAME.pub)")
            }
            let scoped = policy.roles[words[1]]
            guard let role = scoped?.base ?? Role(rawValue: words[1]) else {
                let policyRoles = policy.roles.keys.sorted()
                throw ConfigurationError(
                    description:
                        "\(place): role '\(words[1])' is not one of read, write, admin\(policyRoles.isEmpty ? "" : " or the policy's \(policyRoles.joined(separator: ", "))")"
                )
            }
            guard keys[words[0]] == nil else {
                throw ConfigurationError(description: "\(place): the key \(words[0]) is listed twice")
            }
            // The name is the words before the first attr=value (a name may have spaces).
            let rest = words.dropFirst(2)
            let nameWords = rest.prefix { !$0.contains("=") }
            var attributes: [String: String] = [:]
            for word in rest.dropFirst(nameWords.count) {
                let parts = word.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let attribute = String(parts[0])
                guard parts.count == 2, Self.isAttributeName(attribute), attribute != "keyName" else {
                    throw ConfigurationError(
                        description:
                            "\(place): '\(word)' is not attr=value (attr a letter then letters, digits or _, not keyName)"
                    )
                }
                guard attributes[attribute] == nil else {
                    throw ConfigurationError(description: "\(place): the attribute '\(attribute)' is given twice")
                }
                attributes[attribute] = String(parts[1])
            }
            let name = nameWords.isEmpty ? String(words[0].prefix(8)) : nameWords.joined(separator: " ")
            var key = AuthorizedKey(publicKey: words[0], role: role, name: name)
            key.roleName = words[1]
            key.attributes = attributes
            if let scoped {
                do {
                    let scope = try KeyScope(role: words[1], rules: scoped, keyName: name, attributes: attributes)
                    try schema.map { (schema) throws(ConfigurationError) in try scope.validate(against: schema) }
                    key.scope = scope
                } catch {
                    throw ConfigurationError(description: "\(place): \(error.description)")
                }
            }
            keys[words[0]] = key
        }
        self.keys = keys
    }

    /// Whether `name` can be a `$variable`: a letter, then letters, digits or `_`.
    static func isAttributeName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.properties.isAlphabetic || first == "_" else { return false }
        return name.unicodeScalars.allSatisfy { $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_" }
    }

    /// Reads and parses `path`, resolving its roles with `policy` (see ``init(parsing:source:policy:schema:)``).
    public init(contentsOf path: String, policy: AccessPolicy = AccessPolicy(), schema: Schema? = nil)
        throws(ConfigurationError)
    {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = access(path, R_OK) == 0 ? "not a readable file" : String(cString: strerror(errno))
            throw ConfigurationError(description: "cannot read the authorized keys file \(path): \(reason)")
        }
        try self.init(parsing: String(decoding: data, as: UTF8.self), source: path, policy: policy, schema: schema)
    }
}

/// Reads a Z85 key from a key file: its first line that is a key (Z85 has `#`: comments have spaces).
public func readKeyFile(_ path: String, what: String) throws(ConfigurationError) -> String {
    guard let data = FileManager.default.contents(atPath: path) else {
        let reason = access(path, R_OK) == 0 ? "not a readable file" : String(cString: strerror(errno))
        throw ConfigurationError(description: "cannot read the \(what) file \(path): \(reason)")
    }
    let key =
        String(decoding: data, as: UTF8.self).split(separator: "\n")
        .map { $0.trimmingCharacters(in: .whitespaces) }
        .first { Curve.isZ85Key($0) } ?? ""
    guard Curve.isZ85Key(key) else {
        throw ConfigurationError(
            description:
                "the \(what) file \(path) does not hold a Z85 key (40 characters; `depot keys generate NAME` writes one)"
        )
    }
    return key
}

/// The keys in force, shared by the ZAP handler (handshakes) and the dispatcher
/// (every request), replaced as a whole on SIGHUP.
final class KeyRing: Sendable {
    private let current: Mutex<AuthorizedKeys>

    init(_ keys: AuthorizedKeys) { current = Mutex(keys) }

    /// The key, if it is authorized now.
    func key(_ publicKey: String) -> AuthorizedKey? { current.withLock { $0.keys[publicKey] } }

    /// Replaces the keys; returns the public keys that were removed, and for
    /// each key kept whose scope changed, the entities whose rules changed.
    func replace(with keys: AuthorizedKeys) -> (removed: Set<String>, rescoped: [String: Set<String>]) {
        current.withLock { old in
            let removed = Set(old.keys.keys).subtracting(keys.keys.keys)
            var rescoped: [String: Set<String>] = [:]
            for (id, key) in keys.keys {
                guard let previous = old.keys[id], previous.scope != key.scope else { continue }
                let before = previous.scope?.entities ?? [:]
                let after = key.scope?.entities ?? [:]
                rescoped[id] = Set(before.keys).union(after.keys).filter { before[$0] != after[$0] }
            }
            old = keys
            return (removed, rescoped)
        }
    }

    /// How many keys are authorized.
    var count: Int { current.withLock { $0.keys.count } }
}
