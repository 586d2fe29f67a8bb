import DepotProtocol
import Foundation
import XCTest
import ZeroMQ

/// A bare DEALER socket speaking raw bytes to depotd, for tests of input the
/// typed client would never send.
final class RawClient {
    let context: Context
    let socket: Socket

    /// Connects to `endpoint`, as a CURVE client when `curve` (server public key, client pair) is given.
    init(endpoint: String, curve: (serverKey: String, keyPair: CurveKeyPair)? = nil, receiveTimeout: Int32 = 5000)
        throws
    {
        context = try Context()
        socket = try Socket(context: context, type: .dealer)
        try socket.setLinger(milliseconds: 0)
        try socket.setReceiveTimeout(milliseconds: receiveTimeout)
        if let curve { try socket.setCurveClient(serverKey: curve.serverKey, keyPair: curve.keyPair) }
        try socket.connect(endpoint)
    }

    deinit {
        socket.close()
        context.terminate()
    }

    /// Sends `text` as one frame.
    func send(_ text: String) throws { try socket.send(Array(text.utf8)) }

    /// Sends bytes as one frame.
    func send(bytes: [UInt8]) throws { try socket.send(bytes) }

    /// The next message, parsed, or `nil` when nothing came within the receive timeout.
    func receiveIfAny() throws -> JSONValue? {
        guard let message = try socket.receive() else { return nil }
        return try JSONParser.parse(message.last ?? [])
    }

    /// The next message, parsed; fails the test on timeout.
    func receive(file: StaticString = #filePath, line: UInt = #line) throws -> JSONValue {
        guard let message = try socket.receive() else {
            XCTFail("no answer within 5 s", file: file, line: line)
            return .null
        }
        return try JSONParser.parse(message.last ?? [])
    }

    /// Sends a request and returns the response (skipping notifications).
    func call(_ method: String, _ params: String = "{}", id: Int = 1) throws -> JSONValue {
        try send(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"#)
        while true {
            let message = try receive()
            if message["method"] == nil { return message }
        }
    }

    /// `initialize`s the session.
    func initialize() throws {
        let response = try call(
            "initialize", #"{"protocolVersion":"1","clientInfo":{"name":"raw","version":"1"},"capabilities":{}}"#)
        XCTAssertNotNil(response["result"]?["sessionId"])
    }
}
