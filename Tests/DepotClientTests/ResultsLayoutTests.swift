import DepotClient
import DepotTestSupport
import Foundation
import XCTest

/// Delta application by the rules of DESIGN.md §7, with hand-made notifications.
final class ResultsLayoutTests: XCTestCase {
    private func layout(_ sections: [(String, [String])], seq: Int64 = 0) -> ResultsLayout {
        ResultsLayout(seq: seq, sections: sections.map { ResultsLayout.Section(name: $0.0, ids: $0.1) })
    }

    func testTheDesignExample() throws {
        var results = layout(
            [
                ("Asia", ["T/1", "T/2"]), ("Europe", ["T/3", "T/4", "T/5", "T/6"]), ("Oceania", ["T/9"]),
            ], seq: 6)
        let change = ResultsDidChange.Parameters(
            subscription: "s1", seq: 7, transaction: 912,
            sections: [
                SectionChange(type: .delete, index: 2, name: "Oceania"),
                SectionChange(type: .insert, index: 0, name: "Africa"),
            ],
            objects: [
                ObjectChange(type: .delete, indexPath: [2, 0], id: "T/9"),
                ObjectChange(type: .insert, newIndexPath: [0, 0], id: "T/7", object: ["id": "T/7"]),
                ObjectChange(type: .move, indexPath: [1, 3], newIndexPath: [2, 0], id: "T/6", object: ["id": "T/6"]),
                ObjectChange(
                    type: .update, indexPath: [1, 1], newIndexPath: [1, 1], id: "T/2", object: ["id": "T/2"]),
            ])
        try results.apply(change)
        XCTAssertEqual(results.seq, 7)
        XCTAssertEqual(results.sections.map(\.name), ["Africa", "Asia", "Europe"])
        XCTAssertEqual(results.sections.map(\.ids), [["T/7"], ["T/1", "T/2"], ["T/6", "T/3", "T/4", "T/5"]])
        XCTAssertEqual(results.sections[0].indexTitle, "A")
    }

    func testMoveWithEqualIndexPathsKeepsThePlace() throws {
        var results = layout([("", ["a", "b", "c"])])
        try results.apply(
            .init(
                subscription: "s", seq: 1, transaction: 2, sections: [],
                objects: [
                    ObjectChange(type: .move, indexPath: [0, 1], newIndexPath: [0, 1], id: "b", object: ["id": "b"])
                ]))
        XCTAssertEqual(results.ids, ["a", "b", "c"])
    }

    func testSeveralRemovalsAndInsertionsUseDescendingThenAscendingOrder() throws {
        var results = layout([("", ["a", "b", "c", "d", "e"])])
        // Listed in an unhelpful order on purpose: apply must sort them.
        try results.apply(
            .init(
                subscription: "s", seq: 1, transaction: 2, sections: [],
                objects: [
                    ObjectChange(type: .delete, indexPath: [0, 1], id: "b"),
                    ObjectChange(type: .insert, newIndexPath: [0, 4], id: "y", object: ["id": "y"]),
                    ObjectChange(type: .delete, indexPath: [0, 3], id: "d"),
                    ObjectChange(type: .move, indexPath: [0, 0], newIndexPath: [0, 3], id: "a", object: ["id": "a"]),
                    ObjectChange(type: .insert, newIndexPath: [0, 0], id: "x", object: ["id": "x"]),
                ]))
        XCTAssertEqual(results.ids, ["x", "c", "e", "a", "y"])
    }

    func testAGapIsReportedAndLeavesTheLayoutAlone() {
        var results = layout([("", ["a"])], seq: 3)
        let before = results
        XCTAssertThrowsError(
            try results.apply(.init(subscription: "s", seq: 5, transaction: 9, sections: [], objects: []))
        ) { error in
            XCTAssertEqual(error as? ResultsLayoutError, .gap(expected: 4, received: 5))
        }
        XCTAssertEqual(results, before)
    }

    func testAChangeThatDoesNotFitIsInconsistentAndLeavesTheLayoutAlone() {
        var results = layout([("", ["a", "b"])])
        let before = results
        XCTAssertThrowsError(
            try results.apply(
                .init(
                    subscription: "s", seq: 1, transaction: 2, sections: [],
                    objects: [
                        ObjectChange(type: .insert, newIndexPath: [0, 0], id: "x", object: ["id": "x"]),
                        ObjectChange(type: .delete, indexPath: [0, 0], id: "b"),
                    ]))
        ) { error in
            guard case .inconsistent = error as? ResultsLayoutError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(results, before)
    }

    func testSnapshotCutsIdsIntoSections() throws {
        let snapshot = ResultsSnapshot.Result(
            seq: 4, transaction: 10,
            sections: [
                SectionInfo(name: "Africa", indexTitle: "A", count: 1),
                SectionInfo(name: "Europe", indexTitle: "E", count: 2),
            ],
            ids: ["T/1", "T/2", "T/3"])
        let results = try ResultsLayout(snapshot: snapshot)
        XCTAssertEqual(results.seq, 4)
        XCTAssertEqual(results.sections.map(\.ids), [["T/1"], ["T/2", "T/3"]])
        XCTAssertEqual(results.indexPath(atOffset: 2), IndexPath(item: 1, section: 1))
        XCTAssertEqual(results.offset(of: IndexPath(item: 1, section: 1)), 2)
        XCTAssertThrowsError(
            try ResultsLayout(snapshot: .init(seq: 0, transaction: 0, sections: snapshot.sections, ids: ["T/1"])))
    }

    /// Random transitions: the deltas computed by the contract's definitions
    /// (old index paths for deletes and move sources, new ones for inserts and
    /// move targets) must rebuild the new results exactly.
    func testRandomTransitionsRebuildTheNewResults() throws {
        var generator = SeededGenerator(seed: 7)
        for round in 0..<500 {
            let old = Model.random(using: &generator)
            let new = old.transformed(using: &generator)
            var results = old.layout(seq: Int64(round))
            try results.apply(Model.delta(from: old, to: new, seq: Int64(round + 1)))
            XCTAssertEqual(results, new.layout(seq: Int64(round + 1)), "round \(round)")
        }
    }
}

/// A sectioned result: rows of (section name, id), grouped by name in name order.
private struct Model {
    var rows: [String: [String]]  // section name -> ids in order
    var moved: Set<String> = []

    static let names = ["A", "B", "C", "D", "E"]

    static func random(using generator: inout SeededGenerator) -> Model {
        var rows: [String: [String]] = [:]
        for index in 0..<Int.random(in: 0..<12, using: &generator) {
            rows[names.randomElement(using: &generator)!, default: []].append("o\(index)")
        }
        return Model(rows: rows)
    }

    func transformed(using generator: inout SeededGenerator) -> Model {
        var next = Model(rows: rows)
        let all = rows.values.flatMap { $0 }
        for id in all.shuffled(using: &generator).prefix(Int.random(in: 0...3, using: &generator)) {
            next.remove(id)
            if Bool.random(using: &generator) {
                next.insert(id, using: &generator)
                next.moved.insert(id)
            }
        }
        for index in 0..<Int.random(in: 0...3, using: &generator) {
            next.insert("n\(index)", using: &generator)
        }
        return next
    }

    mutating func remove(_ id: String) {
        for name in rows.keys {
            rows[name]?.removeAll { $0 == id }
            if rows[name]?.isEmpty == true { rows[name] = nil }
        }
    }

    mutating func insert(_ id: String, using generator: inout SeededGenerator) {
        let name = Self.names.randomElement(using: &generator)!
        var ids = rows[name] ?? []
        ids.insert(id, at: Int.random(in: 0...ids.count, using: &generator))
        rows[name] = ids
    }

    var sectionNames: [String] { rows.keys.sorted() }

    func indexPath(of id: String) -> [Int]? {
        for (section, name) in sectionNames.enumerated() {
            if let item = rows[name]!.firstIndex(of: id) { return [section, item] }
        }
        return nil
    }

    func layout(seq: Int64) -> ResultsLayout {
        ResultsLayout(seq: seq, sections: sectionNames.map { ResultsLayout.Section(name: $0, ids: rows[$0]!) })
    }

    static func delta(from old: Model, to new: Model, seq: Int64) -> ResultsDidChange.Parameters {
        var sections: [SectionChange] = []
        for (index, name) in old.sectionNames.enumerated() where new.rows[name] == nil {
            sections.append(SectionChange(type: .delete, index: index, name: name))
        }
        for (index, name) in new.sectionNames.enumerated() where old.rows[name] == nil {
            sections.append(SectionChange(type: .insert, index: index, name: name))
        }
        var objects: [ObjectChange] = []
        let oldIDs = Set(old.rows.values.flatMap { $0 })
        let newIDs = Set(new.rows.values.flatMap { $0 })
        for id in oldIDs.subtracting(newIDs) {
            objects.append(ObjectChange(type: .delete, indexPath: old.indexPath(of: id), id: id))
        }
        for id in newIDs.subtracting(oldIDs) {
            objects.append(
                ObjectChange(type: .insert, newIndexPath: new.indexPath(of: id), id: id, object: ["id": .string(id)]))
        }
        for id in new.moved where oldIDs.contains(id) {
            objects.append(
                ObjectChange(
                    type: .move, indexPath: old.indexPath(of: id), newIndexPath: new.indexPath(of: id), id: id,
                    object: ["id": .string(id)]))
        }
        return .init(subscription: "s", seq: seq, transaction: seq, sections: sections, objects: objects.shuffled())
    }
}
