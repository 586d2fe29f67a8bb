import DepotStore
import XCTest

@testable import DepotServer

final class OrderedIndexTests: XCTestCase {
    /// Random inserts and removes against a plain sorted array, across chunk splits and merges.
    func testMatchesASortedArrayUnderRandomChanges() {
        var generator = SystemRandomNumberGenerator()
        let ascending = [false, true]
        var index = OrderedIndex(ascending: ascending)
        var reference: [OrderedIndex.Entry] = []
        var nextID: Int64 = 1
        for step in 0..<6000 {
            if reference.isEmpty || Int.random(in: 0..<3, using: &generator) > 0 {
                let key = SortKey(values: [
                    .integer(Int64.random(in: 0..<50, using: &generator)),
                    Bool.random() ? .null : .text(String(Int.random(in: 0..<20))),
                ])
                let entry = OrderedIndex.Entry(key: key, id: nextID)
                nextID += 1
                index.insert(entry)
                let position = reference.firstIndex { !index.less($0, entry) } ?? reference.count
                reference.insert(entry, at: position)
            } else {
                let victim = reference.remove(at: Int.random(in: 0..<reference.count, using: &generator))
                XCTAssertEqual(index.remove(victim.id)?.id, victim.id)
            }
            if step % 500 == 0 || step == 5999 {
                XCTAssertEqual(index.count, reference.count)
                XCTAssertEqual(index.allEntries.map(\.id), reference.map(\.id))
                for probe in reference.shuffled().prefix(20) {
                    XCTAssertEqual(index.rank(of: probe.id), reference.firstIndex { $0.id == probe.id })
                    XCTAssertEqual(index.entry(for: probe.id)?.key, probe.key)
                }
                let start = reference.count / 3
                XCTAssertEqual(
                    index.entries(in: start..<min(start + 700, reference.count)).map(\.id),
                    reference[start..<min(start + 700, reference.count)].map(\.id))
            }
        }
    }

    func testBuildFromSortedEntries() {
        let entries = (0..<10_000).map {
            OrderedIndex.Entry(key: SortKey(values: [.real(Double($0 / 3))]), id: Int64($0 + 1))
        }
        var index = OrderedIndex(sortedEntries: entries, ascending: [true])
        XCTAssertEqual(index.count, 10_000)
        XCTAssertEqual(index.rank(of: 5000), 4999)
        XCTAssertEqual(index.lowerBound(OrderedIndex.Entry(key: SortKey(values: [.real(100)]), id: 0)), 300)
        index.insert(OrderedIndex.Entry(key: SortKey(values: [.real(-1)]), id: 20_000))
        XCTAssertEqual(index.rank(of: 20_000), 0)
        XCTAssertEqual(index.rank(of: 5000), 5000)
    }

    /// The memory budget of a subscription is ids and sort keys: keep an entry small.
    func testEntryOfASingleKeySortIsCompact() {
        XCTAssertLessThanOrEqual(MemoryLayout<OrderedIndex.Entry>.stride, 40)
    }

    func testSortValuesOrderLikeSQLite() {
        let ordered: [SortValue] = [
            .null, .integer(-5), .real(-1.5), .integer(0), .real(0.5), .integer(2), .text(""), .text("B"), .text("a"),
            .text("é"), .blob([0]),
        ]
        for (i, a) in ordered.enumerated() {
            for (j, b) in ordered.enumerated() {
                XCTAssertEqual(a.compare(b), i < j ? -1 : (i == j ? 0 : 1), "\(a) vs \(b)")
            }
        }
    }
}

final class IDMapTests: XCTestCase {
    func testMatchesADictionaryUnderRandomChanges() {
        var map = IDMap()
        var reference: [Int64: Int32] = [:]
        var generator = SystemRandomNumberGenerator()
        for step in 0..<50_000 {
            let key = Int64.random(in: 1...3000, using: &generator)
            if Bool.random(using: &generator) {
                let value = Int32(step % 1000)
                map[key] = value
                reference[key] = value
            } else {
                XCTAssertEqual(map.remove(key), reference.removeValue(forKey: key))
            }
        }
        XCTAssertEqual(map.count, reference.count)
        for key in Int64(1)...3000 { XCTAssertEqual(map[key], reference[key], "key \(key)") }
    }
}
