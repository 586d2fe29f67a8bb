import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// `saveId` on `store/save` against a real daemon (DESIGN.md §6): a resent save is answered
/// with its first answer and applied once, across a kill -9 and a restart, in a JSON-RPC
/// batch and when two clients send it at once; a failed save is not remembered; a bad
/// `saveId` is refused naming `params.saveId`.
final class SaveIdEndToEndTests: XCTestCase {
    private static let model =
        #"{"entities":[{"name":"Note","attributes":[{"name":"title","type":"string"}],"uniquenessConstraints":[["title"]]}]}"#

    private func start(_ daemon: Daemon) throws -> RawClient {
        let raw = try RawClient(endpoint: daemon.endpoint)
        try raw.initialize()
        XCTAssertNotNil(try raw.call("model/define", Self.model)["result"])
        return raw
    }

    private func save(_ title: String, saveId: String) -> String {
        #"{"inserted":[{"entity":"Note","tempId":"n","values":{"title":"\#(title)"}}],"saveId":"\#(saveId)"}"#
    }

    private func count(_ raw: RawClient) throws -> Int64? {
        try raw.call("store/count", #"{"entity":"Note"}"#)["result"]?["count"]?.intValue
    }

    private func latest(_ raw: RawClient) throws -> Int64? {
        try raw.call("store/history", #"{"since":0,"limit":1}"#)["result"]?["latest"]?.intValue
    }

    func testAResentSaveGetsTheIdenticalAnswerAndTheObjectExistsOnce() throws {
        let daemon = try Daemon()
        let raw = try start(daemon)
        let first = try raw.call("store/save", save("groceries", saveId: "7d0c-1"))["result"]
        XCTAssertNotNil(first?["ids"]?["n"])
        let again = try raw.call("store/save", save("groceries", saveId: "7d0c-1"), id: 2)["result"]
        XCTAssertEqual(again, first, "same ids, versions and transaction")
        XCTAssertEqual(try count(raw), 1)
        XCTAssertEqual(try latest(raw), first?["transaction"]?.intValue)
    }

    func testTheAnswerSurvivesAKillAndARestart() throws {
        let daemon = try Daemon()
        let raw = try start(daemon)
        let first = try raw.call("store/save", save("groceries", saveId: "survivor"))["result"]
        XCTAssertNotNil(first?["transaction"])
        daemon.kill()  // SIGKILL right after the answer
        let restarted = try Daemon(dataDirectory: daemon.dataDirectory)
        defer { restarted.removeData() }
        let client = try RawClient(endpoint: restarted.endpoint)
        try client.initialize()
        let again = try client.call("store/save", save("groceries", saveId: "survivor"))["result"]
        XCTAssertEqual(again, first)
        XCTAssertEqual(try count(client), 1)
    }

    func testAFailedSaveIsNotRememberedAndRunsWhenResent() throws {
        let daemon = try Daemon()
        let raw = try start(daemon)
        let blocker = try raw.call("store/save", save("taken", saveId: "blocker"))["result"]?["ids"]?["n"]
        let refused = try raw.call("store/save", save("taken", saveId: "retry-me"), id: 2)
        XCTAssertEqual(refused["error"]?["code"], -32011)
        let id = try XCTUnwrap(blocker?.stringValue)
        XCTAssertNotNil(try raw.call("store/save", #"{"deleted":[{"id":"\#(id)"}]}"#, id: 3)["result"])
        let applied = try raw.call("store/save", save("taken", saveId: "retry-me"), id: 4)["result"]
        XCTAssertEqual(applied?["transaction"]?.intValue, try latest(raw), "the resent save ran this time")
        XCTAssertEqual(try count(raw), 1)
    }

    func testBadSaveIdsAreRefusedNamingTheFieldAndChangeNothing() throws {
        let daemon = try Daemon()
        let raw = try start(daemon)
        let before = try latest(raw)
        let long = String(repeating: "x", count: 129)
        let bad = [#""""#, #""\#(long)""#, "7", "[\"a\"]", "{}"]
        for (index, value) in bad.enumerated() {
            let params = #"{"inserted":[{"entity":"Note","values":{"title":"t"}}],"saveId":\#(value)}"#
            let response = try raw.call("store/save", params, id: 10 + index)
            XCTAssertEqual(response["error"]?["code"], -32602, value)
            XCTAssertEqual(response["error"]?["data"]?["field"], "params.saveId", value)
        }
        XCTAssertEqual(try latest(raw), before)
        XCTAssertEqual(try count(raw), 0)
        XCTAssertEqual(try raw.call("ping")["result"], [:], "the daemon is still there")
    }

    func testTwoSavesWithOneSaveIdInABatchApplyOnce() throws {
        let daemon = try Daemon()
        let raw = try start(daemon)
        let request = { (id: Int, title: String, saveId: String) in
            #"{"jsonrpc":"2.0","id":\#(id),"method":"store/save","params":\#(self.save(title, saveId: saveId))}"#
        }
        try raw.send("[\(request(1, "a", "batched")),\(request(2, "a", "batched")),\(request(3, "b", "other"))]")
        var responses: [JSONValue] = []
        while responses.isEmpty {
            let message = try raw.receive()
            if let array = message.arrayValue { responses = array }
        }
        XCTAssertEqual(responses.count, 3)
        let byId = Dictionary(uniqueKeysWithValues: responses.map { ($0["id"]?.intValue ?? 0, $0) })
        XCTAssertNotNil(byId[1]?["result"]?["ids"]?["n"])
        XCTAssertEqual(byId[2]?["result"], byId[1]?["result"], "the second gets the first's answer")
        XCTAssertNotNil(byId[3]?["result"]?["ids"]?["n"])
        XCTAssertEqual(try count(raw), 2)
    }

    func testTwoClientsSendingOneSaveIdAtOnceGetOneAnswer() throws {
        let daemon = try Daemon()
        let raw = try start(daemon)
        let clients = try (0..<4).map { _ in try RawClient(endpoint: daemon.endpoint) }
        for client in clients { try client.initialize() }
        for client in clients {
            try client.send(
                #"{"jsonrpc":"2.0","id":5,"method":"store/save","params":\#(save("raced", saveId: "at-once"))}"#)
        }
        var answers: [JSONValue] = []
        for client in clients {
            var answer: JSONValue?
            while answer == nil {
                let message = try client.receive()
                if message["id"] == 5 { answer = message["result"] ?? message }
            }
            answers.append(answer!)
        }
        XCTAssertNotNil(answers[0]["ids"]?["n"], "\(answers[0])")
        for answer in answers { XCTAssertEqual(answer, answers[0]) }
        XCTAssertEqual(try count(raw), 1)
    }
}
