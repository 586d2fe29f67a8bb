import CZeroMQ

/// A CURVE key pair in Z85 text (40 characters each), as libzmq's `zmq_curve_keypair` makes them.
public struct CurveKeyPair: Sendable, Hashable {
    /// The public key: give it to peers.
    public let publicKey: String
    /// The secret key: keep it private.
    public let secretKey: String

    /// A new random key pair (libzmq built with libsodium).
    public static func generate() throws(ZMQError) -> CurveKeyPair {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        guard zmq_curve_keypair(&publicKey, &secretKey) == 0 else { throw .last("zmq_curve_keypair") }
        return CurveKeyPair(
            publicKey: String(decoding: publicKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self),
            secretKey: String(decoding: secretKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    /// The pair of `secretKey`, its public key derived (`zmq_curve_public`).
    ///
    /// - Throws: `EINVAL` when `secretKey` is not 40 characters of Z85.
    public init(secretKey: String) throws(ZMQError) {
        guard Curve.isZ85Key(secretKey) else { throw ZMQError(code: EINVAL, operation: "curve secret key") }
        var publicKey = [CChar](repeating: 0, count: 41)
        let rc = secretKey.withCString { zmq_curve_public(&publicKey, $0) }
        guard rc == 0 else { throw .last("zmq_curve_public") }
        self.publicKey = String(decoding: publicKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.secretKey = secretKey
    }

    private init(publicKey: String, secretKey: String) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}

/// libzmq monitor event numbers that a socket's owner may need to tell apart.
public enum ZMQEvents {
    /// The peer refused the handshake's credentials (CURVE: ZAP said no).
    public static let handshakeFailedAuth = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
    /// The handshake broke the protocol (CURVE: mismatched keys).
    public static let handshakeFailedProtocol = ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
    /// The handshake failed for another reason.
    public static let handshakeFailedNoDetail = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
}

/// Z85 helpers for CURVE keys.
public enum Curve {
    /// The Z85 alphabet (ZeroMQ RFC 32).
    static let alphabet = Set(
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8)

    /// Whether `text` looks like a Z85-encoded 32-byte key: 40 characters of the Z85 alphabet.
    public static func isZ85Key(_ text: String) -> Bool {
        text.utf8.count == 40 && text.utf8.allSatisfy { alphabet.contains($0) }
    }

    /// `bytes` (a multiple of 4 long, e.g. a 32-byte key) as Z85 text.
    public static func z85Encode(_ bytes: [UInt8]) -> String? {
        guard bytes.count % 4 == 0 else { return nil }
        var text = [CChar](repeating: 0, count: bytes.count * 5 / 4 + 1)
        guard bytes.withUnsafeBufferPointer({ zmq_z85_encode(&text, $0.baseAddress, $0.count) }) != nil else {
            return nil
        }
        return String(decoding: text.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether libzmq was built with CURVE (`zmq_has("curve")`).
    public static var isAvailable: Bool { zmq_has("curve") != 0 }
}

extension Socket {
    private func setString(_ option: Int32, _ text: String) throws(ZMQError) {
        let bytes = Array(text.utf8)
        let rc = bytes.withUnsafeBytes { zmq_setsockopt(handle, option, $0.baseAddress, $0.count) }
        guard rc == 0 else { throw .last("setsockopt \(option)") }
    }

    private func setFlag(_ option: Int32, _ on: Bool) throws(ZMQError) {
        var value: Int32 = on ? 1 : 0
        guard zmq_setsockopt(handle, option, &value, MemoryLayout<Int32>.size) == 0 else {
            throw .last("setsockopt \(option)")
        }
    }

    /// Makes the endpoints bound from now on CURVE servers with `secretKey` (Z85).
    ///
    /// Options are copied into each endpoint when it is bound: endpoints bound
    /// before this call stay as they were (Depot's `ipc://` endpoint stays plain).
    public func setCurveServer(secretKey: String) throws(ZMQError) {
        try setFlag(ZMQ_CURVE_SERVER, true)
        try setString(ZMQ_CURVE_SECRETKEY, secretKey)
    }

    /// Makes connections from now on CURVE clients of the server whose public key is `serverKey`.
    public func setCurveClient(serverKey: String, keyPair: CurveKeyPair) throws(ZMQError) {
        try setString(ZMQ_CURVE_SERVERKEY, serverKey)
        try setString(ZMQ_CURVE_PUBLICKEY, keyPair.publicKey)
        try setString(ZMQ_CURVE_SECRETKEY, keyPair.secretKey)
    }

    /// `ZMQ_ZAP_DOMAIN`: the domain this socket's endpoints authenticate in.
    public func setZAPDomain(_ domain: String) throws(ZMQError) { try setString(ZMQ_ZAP_DOMAIN, domain) }

    /// `ZMQ_ZAP_ENFORCE_DOMAIN` (libzmq 4.3 draft option 93): without a ZAP
    /// handler, refuse every handshake instead of accepting it.
    ///
    /// - Returns: `false` when the linked libzmq was built without the draft API
    ///   (the option is then unknown; a bound ZAP handler still decides every handshake).
    @discardableResult
    public func setZAPEnforceDomain(_ on: Bool) -> Bool {
        (try? setFlag(93, on)) != nil
    }

    /// `ZMQ_CURVE_SERVER` as set.
    public var isCurveServer: Bool {
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        return zmq_getsockopt(handle, ZMQ_CURVE_SERVER, &value, &size) == 0 && value != 0
    }

    /// Receives one multipart message and the value of a metadata `property`
    /// of its last frame (`zmq_msg_gets`: `User-Id` is what the ZAP handler
    /// returned for the connection, `Peer-Address` its address).
    ///
    /// - Returns: `nil` when nothing was ready.
    public func receive(dontWait: Bool, property: String) throws(ZMQError) -> (Message, String?)? {
        try receive(dontWait: dontWait, reading: property).map { ($0.frames, $0.property) }
    }
}
