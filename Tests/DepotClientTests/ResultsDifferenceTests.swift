import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotClient

/// The catch-up's difference between two layouts (stored results and the daemon's) is a change
/// that `ResultsLayout.apply` accepts and that takes the old layout exactly to the new one.
final class ResultsDifferenceTests: XCTestCase {
    private func layout(_ sections: [(String, [String])], seq: Int64 = 0) -> ResultsLayout {
        ResultsLayout(seq: seq, sections: sections.map { ResultsLayout.Section(name: $0.0, ids: $0.1) })
    }

    /// Applies the difference from `old` to `new` to `old`, as the controller does.
    private func applied(_ old: ResultsLayout, _ new: ResultsLayout, changed: Set<String> = []) throws -> (
        ResultsLayout, ResultsDifference
    ) {
        let difference = ResultsDifference(from: old, to: new, changed: changed)
        var result = old
        result.seq = new.seq - 1
        try result.apply(
            ResultsDidChange.Parameters(
                subscription: "s", seq: new.seq, transaction: 1, sections: difference.sections,
                objects: difference.objects))
        return (result, difference)
    }

    func testTheSameLayoutIsNoChangeAndChangedValuesAreUpdatesInPlace() throws {
        let old = layout([("Asia", ["T/1", "T/2"]), ("Europe", ["T/3"])], seq: 4)
        var new = old
        new.seq = 9
        XCTAssertTrue(ResultsDifference(from: old, to: new, changed: []).isEmpty)
        let (result, difference) = try applied(old, new, changed: ["T/2"])
        XCTAssertEqual(result, new)
        XCTAssertEqual(
            difference.objects, [ObjectChange(type: .update, indexPath: [0, 1], newIndexPath: [0, 1], id: "T/2")])
    }

    func testOneObjectThatChangedPlaceIsTheOnlyMove() throws {
        let old = layout([("", ["a", "b", "c", "d", "e"])])
        let new = layout([("", ["a", "c", "d", "b", "e"])], seq: 1)
        let (result, difference) = try applied(old, new)
        XCTAssertEqual(result, new)
        XCTAssertEqual(difference.objects.map(\.type), [.move])
        XCTAssertEqual(difference.objects.first?.id, "b")
    }

    func testSectionsComeAndGoAndObjectsMoveBetweenThem() throws {
        let old = layout([("Asia", ["T/1", "T/2"]), ("Europe", ["T/3", "T/4"]), ("Oceania", ["T/9"])], seq: 2)
        let new = layout([("Africa", ["T/9", "T/7"]), ("Asia", ["T/2"]), ("Europe", ["T/3", "T/4", "T/1"])], seq: 3)
        let (result, difference) = try applied(old, new)
        XCTAssertEqual(result, new)
        XCTAssertEqual(
            Set(difference.sections),
            [
                SectionChange(type: .delete, index: 2, name: "Oceania"),
                SectionChange(type: .insert, index: 0, name: "Africa"),
            ])
        XCTAssertEqual(Set(difference.objects.filter { $0.type == .move }.map(\.id)), ["T/1", "T/9"])
        XCTAssertEqual(difference.objects.filter { $0.type == .insert }.map(\.id), ["T/7"])
    }

    /// Random pairs of layouts (fixed seeds): the difference always reproduces the new layout,
    /// and objects kept in order in a kept section never move.
    func testRandomLayoutsAreReproducedExactly() throws {
        var random = SeededGenerator(seed: 27)
        let names = ["", "A", "B", "C", "D", "E"]
        for round in 0..<500 {
            let pool = (0..<40).map { "O/\($0)" }.shuffled(using: &random)
            func randomLayout(seq: Int64) -> ResultsLayout {
                let sectionNames = names.filter { _ in Bool.random(using: &random) }.sorted()
                let count = Int.random(in: 0...pool.count, using: &random)
                var sections = sectionNames.map { ResultsLayout.Section(name: $0) }
                for id in pool.shuffled(using: &random).prefix(sections.isEmpty ? 0 : count) {
                    sections[Int.random(in: 0..<sections.count, using: &random)].ids.append(id)
                }
                return ResultsLayout(seq: seq, sections: sections.filter { !$0.ids.isEmpty })
            }
            let old = randomLayout(seq: Int64(round))
            // Half the rounds change a few objects of the old layout only, the others everything.
            var new: ResultsLayout
            if round % 2 == 0, old.count > 1 {
                new = old
                new.seq += 7
                let section = Int.random(in: 0..<new.sections.count, using: &random)
                if new.sections[section].ids.count > 1 {
                    let id = new.sections[section].ids.remove(at: 0)
                    new.sections[section].ids.append(id)
                }
            } else {
                new = randomLayout(seq: Int64(round) + 3)
            }
            let changed = Set(pool.filter { _ in Bool.random(using: &random) })
            let (result, difference) = try applied(old, new, changed: changed)
            XCTAssertEqual(result, new, "round \(round)")
            if round % 2 == 0, old.count > 1 {
                XCTAssertLessThanOrEqual(
                    difference.objects.filter { $0.type == .move }.count, 1, "round \(round): one object moved")
            }
            for object in difference.objects where object.type == .update {
                XCTAssertTrue(changed.contains(object.id), "round \(round): \(object.id) updated but unchanged")
            }
        }
    }

    func testTheLongestIncreasingRun() {
        XCTAssertEqual(ResultsDifference.longestIncreasingRun([]), [])
        XCTAssertEqual(ResultsDifference.longestIncreasingRun([3, 1, 2, 0, 4]), [1, 2, 4])
        XCTAssertEqual(ResultsDifference.longestIncreasingRun([0, 1, 2]), [0, 1, 2])
        XCTAssertEqual(ResultsDifference.longestIncreasingRun([2, 1, 0]).count, 1)
    }

    /// Section names are text, matched by bytes (DESIGN.md §4): a section renamed to the other
    /// spelling of its name is a section deleted and one inserted, and the layouts differ.
    func testSectionsNamedAlikeAreTwoSections() throws {
        let old = layout([("jos\u{E9}", ["T/1"]), ("x", ["T/2"])], seq: 1)
        let new = layout([("jose\u{301}", ["T/1"]), ("x", ["T/2"])], seq: 2)
        XCTAssertNotEqual(old.sections[0], new.sections[0])
        let (result, difference) = try applied(old, new)
        XCTAssertEqual(result, new)
        XCTAssertEqual(result.sections.map { Array($0.name.utf8) }, new.sections.map { Array($0.name.utf8) })
        XCTAssertEqual(
            difference.sections,
            [
                SectionChange(type: .delete, index: 0, name: "jos\u{E9}"),
                SectionChange(type: .insert, index: 0, name: "jose\u{301}"),
            ])
        XCTAssertEqual(difference.objects.map(\.type), [.move])
        XCTAssertEqual(FetchedResultsSnapshot(layout: new).itemIdentifiers(inSection: "jos\u{E9}"), [])
        XCTAssertEqual(FetchedResultsSnapshot(layout: new).itemIdentifiers(inSection: "jose\u{301}"), ["T/1"])
    }
}
