import Foundation
import ZeroMQ

/// CURVE keys for a daemon with row-level scopes: a server key, an admin key
/// (`setup`) and one `member` key per owner `u<i>`, whose role reads and writes
/// only `Item`s with `owner == $keyName`; the files `depotd` reads them from.
struct OwnerScopedKeys {
    /// The role every member key has.
    static let policy = """
        {"roles":{"member":{"base":"write","entities":{"Item":{"read":"owner == $keyName","write":"owner == $keyName"}}}}}
        """

    /// The daemon's key pair.
    let server: CurveKeyPair
    /// The admin's key pair (defines the model).
    let admin: CurveKeyPair
    /// Owner `u<i>`'s key pair at index `i`.
    let members: [CurveKeyPair]
    /// `--curve-secret-key`, `--authorized-keys` and `--policy` with their files.
    let daemonArguments: [String]

    /// Generates the keys for `owners` owners and writes the files into `directory`.
    init(owners: Int, directory: URL) throws {
        server = try CurveKeyPair.generate()
        admin = try CurveKeyPair.generate()
        var members: [CurveKeyPair] = []
        var lines = "\(admin.publicKey) admin setup\n"
        for owner in 0..<owners {
            let pair = try CurveKeyPair.generate()
            members.append(pair)
            lines += "\(pair.publicKey) member u\(owner)\n"
        }
        self.members = members
        let key = directory.appendingPathComponent("server.key")
        let keys = directory.appendingPathComponent("authorized_keys")
        let policy = directory.appendingPathComponent("policy.json")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try "\(server.secretKey)\n".write(to: key, atomically: true, encoding: .utf8)
        try lines.write(to: keys, atomically: true, encoding: .utf8)
        try Self.policy.write(to: policy, atomically: true, encoding: .utf8)
        daemonArguments = [
            "--curve-secret-key", key.path, "--authorized-keys", keys.path, "--policy", policy.path,
        ]
    }

    /// The client keys of `pair` for this daemon, as ``RawDealer`` takes them.
    func client(_ pair: CurveKeyPair) -> (serverKey: String, publicKey: String, secretKey: String) {
        (server.publicKey, pair.publicKey, pair.secretKey)
    }
}
