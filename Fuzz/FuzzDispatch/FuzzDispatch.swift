import DepotProtocol
import Foundation
import FuzzSupport
import Logging

@testable import DepotServer

/// Fuzz target: whole requests through the daemon's dispatch, as random
/// sequences of messages from a few peers.
///
/// An input is messages separated by NUL bytes; each message's first byte picks
/// one of four peers (its routing id), the rest is the frame. Every message goes
/// through the same path as one from the socket (parse, session rules, roles
/// off, handlers, the store); the run waits for all of it before the next input.
/// Any crash, trap or sanitizer report is a finding.
enum FuzzDispatch {
    static let server: DepotServer = {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-fuzz-dispatch-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        var configuration = ServerConfiguration(
            dataDirectory: directory, endpoints: ["inproc://depot-fuzz"], maxFetchObjects: 1000)
        configuration.model = Self.model
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        let server = try! DepotServer(configuration: configuration, logger: logger)
        return server
    }()

    static let model: [EntityDescription] = [
        EntityDescription(
            name: "Team",
            attributes: [
                AttributeDescription(name: "teamName", type: .string),
                AttributeDescription(name: "wins", type: .integer, defaultValue: 0),
                AttributeDescription(name: "founded", type: .date, optional: true),
                AttributeDescription(name: "logo", type: .binary, optional: true),
                AttributeDescription(name: "extra", type: .json, optional: true),
            ],
            relationships: [
                RelationshipDescription(name: "players", destination: "Player", toMany: true, inverse: "team")
            ],
            uniquenessConstraints: [["teamName"]]),
        EntityDescription(
            name: "Player",
            attributes: [AttributeDescription(name: "name", type: .string)],
            relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")]),
    ]

    static func run(_ bytes: [UInt8]) {
        let server = Self.server
        for chunk in bytes.split(separator: 0, omittingEmptySubsequences: true).prefix(64) {
            let peer: [UInt8] = [0x70, chunk.first! % 4]
            server.service.receive(Array(chunk.dropFirst()), from: peer)
        }
        server.service.drain()
        // Nobody reads the answers: drop them so memory stays flat across runs.
        _ = server.transport.outbox.drain()
    }
}

/// libFuzzer's entry point: one input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzDispatch.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

/// `FuzzDispatch Fuzz/corpus/dispatch` replays the committed corpus; `Fuzz/run.sh` fuzzes (see ``FuzzDriver``).
@main
enum FuzzMain {
    static func main() { FuzzDriver.main("FuzzDispatch", fuzzerTestOneInput) }
}
