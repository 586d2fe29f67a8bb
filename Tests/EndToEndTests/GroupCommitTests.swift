import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Group commit keeps the contract: saves pipelined by several clients at once
/// (some of them failing) each get their own answer, every client hears every
/// committed transaction's `store/didSave` in order, before the answer to the
/// save that committed it, and a failed save changes nothing.
final class GroupCommitTests: XCTestCase {
    func testConcurrentPipelinedSavesKeepEveryClientsOrder() throws {
        let daemon = try Daemon()
        let setup = try RawClient(endpoint: daemon.endpoint)
        try setup.initialize()
        let team = EntityDescription(
            name: "Tally",
            attributes: [
                AttributeDescription(name: "label", type: .string),
                AttributeDescription(name: "count", type: .integer),
            ],
            uniquenessConstraints: [["label"]])
        let model = String(
            decoding: try JSONCoding.encodeBytes(ModelDefine.Parameters(entities: [team])), as: UTF8.self)
        XCTAssertNotNil(try setup.call("model/define", model)["result"])

        let clients = 6
        let savesPerClient = 120
        let reports = SharedFlag<[ClientReport]>([])
        let threads = (0..<clients).map { number in
            Thread {
                let report = Self.run(client: number, saves: savesPerClient, endpoint: daemon.endpoint)
                reports.mutate { $0.append(report) }
            }
        }
        threads.forEach { $0.start() }
        let deadline = Date().addingTimeInterval(120)
        while reports.value.count < clients && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        let all = reports.value
        XCTAssertEqual(all.count, clients, "every client finished")
        let committed = Set(all.flatMap(\.committed))
        for report in all {
            XCTAssertEqual(report.violations, [], "client \(report.client)")
            XCTAssertEqual(report.answers, savesPerClient, "client \(report.client): one answer per save")
        }
        // Everyone heard every transaction anyone committed while it listened (none skipped).
        for report in all {
            let heard = Set(report.heard)
            let last = report.heard.max() ?? 0
            let missing = committed.filter { $0 > report.observingFrom && $0 <= last && !heard.contains($0) }
            XCTAssertEqual(missing, [], "client \(report.client) missed didSaves")
        }
        // Failed saves changed nothing: the store holds exactly the successful inserts.
        let inserted = all.reduce(0) { $0 + $1.inserted }
        XCTAssertEqual(
            try setup.call("store/count", #"{"entity":"Tally"}"#)["result"]?["count"]?.intValue, Int64(inserted))
        XCTAssertGreaterThan(all.reduce(0) { $0 + $1.failed }, 20, "some saves failed")
    }

    struct ClientReport: Sendable {
        var client: Int
        var violations: [String] = []
        var committed: [Int64] = []
        var heard: [Int64] = []
        var observingFrom: Int64 = 0
        var answers = 0
        var inserted = 0
        var failed = 0
    }

    /// One client: observes, then pipelines saves in windows of 8 (unique labels; every fifth a duplicate
    /// that must fail, every seventh invalid), checking the order of everything it receives.
    static func run(client number: Int, saves: Int, endpoint: String) -> ClientReport {
        var report = ClientReport(client: number)
        guard let client = try? RawClient(endpoint: endpoint), (try? client.initialize()) != nil,
            let observed = try? client.call("store/observe", "{}", id: 2), observed["result"] != nil
        else {
            report.violations.append("could not start")
            return report
        }
        var lastHeard: Int64 = 0
        var pending: [Int: String] = [:]
        var nextID = 10
        var sent = 0
        func send() throws {
            let label: String
            var count = "\(sent)"
            switch sent % 35 {
            case 5, 10, 15, 20, 25, 30: label = "shared-\(sent / 35)"  // other clients race for it: most fail
            case 7, 14, 21, 28:
                label = "c\(number)-\(sent)"
                count = #""seven""#  // invalid
            default: label = "c\(number)-\(sent)"
            }
            try client.send(
                #"{"jsonrpc":"2.0","id":\#(nextID),"method":"store/save","params":{"inserted":[{"entity":"Tally","values":{"label":"\#(label)","count":\#(count)}}]}}"#
            )
            pending[nextID] = label
            nextID += 1
            sent += 1
        }
        do {
            while sent < saves || !pending.isEmpty {
                while sent < saves && pending.count < 8 { try send() }
                let message = try client.receive()
                if message["method"] == "store/didSave" {
                    let transaction = message["params"]?["transaction"]?.intValue ?? 0
                    if report.heard.isEmpty { report.observingFrom = transaction - 1 }
                    if transaction <= lastHeard {
                        report.violations.append("didSave \(transaction) after \(lastHeard)")
                    }
                    lastHeard = transaction
                    report.heard.append(transaction)
                    continue
                }
                guard let id = message["id"]?.intValue, pending.removeValue(forKey: Int(id)) != nil else {
                    report.violations.append("an answer to nothing pending: \(message.excerpt())")
                    continue
                }
                report.answers += 1
                if let transaction = message["result"]?["transaction"]?.intValue {
                    report.committed.append(transaction)
                    report.inserted += 1
                    if transaction > lastHeard {
                        report.violations.append("answer for transaction \(transaction) before its didSave")
                    }
                } else {
                    report.failed += 1
                    let code = message["error"]?["code"]?.intValue
                    if code != Int64(ErrorCode.uniqueConstraint.rawValue)
                        && code != Int64(ErrorCode.validationFailed.rawValue)
                    {
                        report.violations.append("unexpected error \(message.excerpt())")
                    }
                }
            }
        } catch {
            report.violations.append("\(error)")
        }
        return report
    }
}
