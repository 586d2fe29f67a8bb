import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// A store in a fresh temporary directory, with the World Cup model defined.
func makeStore(file: StaticString = #filePath, line: UInt = #line) throws -> (Store, URL) {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-store-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let store = try Store(path: directory.appendingPathComponent("depot.sqlite").path)
    _ = try store.defineModel(testModel)
    return (store, directory)
}

let testModel: [EntityDescription] = [
    EntityDescription(
        name: "Team",
        attributes: [
            AttributeDescription(name: "teamName", type: .string),
            AttributeDescription(name: "qualifyingZone", type: .string, indexed: true),
            AttributeDescription(name: "wins", type: .integer, defaultValue: 0),
            AttributeDescription(name: "imageName", type: .string, optional: true),
        ],
        relationships: [
            RelationshipDescription(
                name: "players", destination: "Player", toMany: true, inverse: "team", deleteRule: .cascade)
        ],
        uniquenessConstraints: [["teamName"]],
        indexes: [["qualifyingZone", "wins"]]),
    EntityDescription(
        name: "Player",
        attributes: [
            AttributeDescription(name: "name", type: .string),
            AttributeDescription(name: "age", type: .integer, optional: true),
        ],
        relationships: [RelationshipDescription(name: "team", destination: "Team", inverse: "players")]),
    WorldCup.item,
]

extension Store {
    /// Inserts one team and returns its id.
    func insertTeam(_ name: String, zone: String, wins: Int64 = 0) throws -> String {
        let (result, _) = try save(
            StoreSave.Parameters(inserted: [
                InsertedObject(
                    entity: "Team", tempId: "t",
                    values: ["teamName": .string(name), "qualifyingZone": .string(zone), "wins": .int(wins)])
            ]), writeScope: .unrestricted)
        return result.ids["t"]!
    }

    /// Inserts teams `Team 0` to `Team <count - 1>` in one save each, named `<saveIds> 0`… (`saveId`).
    func insertTeams(_ count: Int, saveIds prefix: String) throws {
        for index in 0..<count {
            _ = try save(
                StoreSave.Parameters(
                    inserted: [
                        InsertedObject(
                            entity: "Team", values: ["teamName": .string("Team \(index)"), "qualifyingZone": "Z"])
                    ], saveId: "\(prefix) \(index)"), writeScope: .unrestricted)
        }
    }
}

/// Asserts that `body` throws an ``RPCError`` with `code`, and returns it.
@discardableResult
func assertRPCError<T>(_ code: ErrorCode, _ body: () throws -> T, file: StaticString = #filePath, line: UInt = #line)
    -> RPCError?
{
    do {
        _ = try body()
        XCTFail("expected error \(code)", file: file, line: line)
        return nil
    } catch let error as RPCError {
        XCTAssertEqual(error.code, code, "\(error.message)", file: file, line: line)
        return error
    } catch {
        XCTFail("unexpected error \(error)", file: file, line: line)
        return nil
    }
}
