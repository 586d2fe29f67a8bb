import Foundation
import ZeroMQ

/// The CURVE keys a client needs to reach a daemon that requires them
/// (DESIGN.md §2): the server's public key, and the client's own key pair
/// (whose public key is listed in the daemon's authorized-keys file).
public struct ClientKeys: Sendable, Hashable {
    /// The server's public key, Z85 (40 characters; the daemon's `NAME.pub`).
    public let serverKey: String
    /// The client's key pair.
    public let keyPair: CurveKeyPair

    /// Keys from Z85 text; the client's public key is derived from `secretKey`.
    public init(serverKey: String, secretKey: String) throws(DepotClientError) {
        guard Curve.isZ85Key(serverKey) else {
            throw .invalidResponse("the server key must be a Z85 public key (40 characters), got '\(serverKey)'")
        }
        do {
            keyPair = try CurveKeyPair(secretKey: secretKey)
        } catch {
            throw .invalidResponse("the client secret key is not a Z85 secret key (40 characters)")
        }
        self.serverKey = serverKey
    }

    /// Keys from files written by `depot keys generate`: `serverKey` is the
    /// server's public key itself or a file holding it (`server.pub`), `keyFile`
    /// the client's secret key file (`NAME.key`).
    public init(serverKey: String, keyFile: String) throws(DepotClientError) {
        let server = Curve.isZ85Key(serverKey) ? serverKey : try Self.readKey(serverKey, what: "server key")
        try self.init(serverKey: server, secretKey: try Self.readKey(keyFile, what: "key"))
    }

    /// A new random CURVE key pair, Z85 (for `depot keys generate`).
    public static func generatePair() throws(DepotClientError) -> (publicKey: String, secretKey: String) {
        do {
            let pair = try CurveKeyPair.generate()
            return (pair.publicKey, pair.secretKey)
        } catch {
            throw .transport(error)
        }
    }

    /// The client's public key, Z85 (the line to add to the daemon's authorized keys).
    public var publicKey: String { keyPair.publicKey }

    /// The first line of `path` that is a Z85 key (Z85 has `#`, so comments are told apart by their spaces).
    static func readKey(_ path: String, what: String) throws(DepotClientError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .invalidResponse("cannot read the \(what) file \(path)")
        }
        let key =
            String(decoding: data, as: UTF8.self).split(separator: "\n")
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .first { Curve.isZ85Key($0) } ?? ""
        guard Curve.isZ85Key(key) else {
            throw .invalidResponse("the \(what) file \(path) does not hold a Z85 key (40 characters)")
        }
        return key
    }
}
