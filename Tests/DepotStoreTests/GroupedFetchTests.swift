import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

@testable import DepotStore

/// Grouped fetches on the predicate case table (teams A…F): values computed by
/// hand, nil groups, having, sorts, paging, store/count, and the -32602 errors.
final class GroupedFetchTests: XCTestCase {
    private var seeded: Store?

    private func store() throws -> Store {
        if let store = seeded { return store }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-grouped-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try Store(path: directory.appendingPathComponent("g.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        try PredicateFixture.seedCaseTable(
            save: { _ = try store.save($0, writeScope: .unrestricted) },
            fetchIDs: { try store.fetch($0, scope: .unrestricted).ids ?? [] })
        seeded = store
        return store
    }

    private func groups(_ request: FetchRequest) throws -> [JSONValue] {
        try store().fetch(request, scope: .unrestricted).objects ?? []
    }

    private static let perZone: [ExpressionDescription] = [
        ExpressionDescription(name: "teams", function: .count),
        ExpressionDescription(name: "wins", function: .sum, key: "wins"),
        ExpressionDescription(name: "rating", function: .avg, key: "rating"),
        ExpressionDescription(name: "first", function: .min, key: "founded"),
        ExpressionDescription(name: "last", function: .max, key: "founded"),
    ]

    func testGroupsByZoneWithNilAsAGroupOfItsOwn() throws {
        let rows = try groups(
            FetchRequest(
                entity: "Team", sort: [SortDescriptor(key: "zone")], groupBy: ["zone"], aggregates: Self.perZone))
        let expected: [JSONValue] = [
            ["zone": nil, "teams": 1, "wins": 0, "rating": nil, "first": nil, "last": nil],
            [
                "zone": "Africa", "teams": 1, "wins": 5, "rating": 2.25, "first": "2001-01-01T12:00:00.000Z",
                "last": "2001-01-01T12:00:00.000Z",
            ],
            ["zone": "Asia", "teams": 1, "wins": 0, "rating": 3.0, "first": nil, "last": nil],
            [
                "zone": "Europe", "teams": 2, "wins": 13, "rating": 0.25, "first": "1850-12-31T23:59:59.999Z",
                "last": "1990-05-01T00:00:00.000Z",
            ],
            ["zone": "europe", "teams": 1, "wins": 3, "rating": 0.5, "first": nil, "last": nil],
        ]
        XCTAssertNil(PredicateFixture.groupsDisagreement(rows, expected), "\(rows)")
        // count and the sum of integers are integers, avg a double.
        XCTAssertEqual(rows[3]["teams"], .int(2))
        XCTAssertEqual(rows[3]["wins"], .int(13))
        XCTAssertEqual(rows[3]["rating"], .double(0.25))
    }

    func testSortsByAggregateWithTiesBrokenByTheGroupKeysAndPages() throws {
        let request = FetchRequest(
            entity: "Team", sort: [SortDescriptor(key: "teams", ascending: false)], groupBy: ["zone"],
            aggregates: [ExpressionDescription(name: "teams", function: .count)])
        XCTAssertEqual(
            try groups(request).map { $0["zone"] ?? "?" }, [.string("Europe"), nil, "Africa", "Asia", "europe"])
        var page = request
        page.limit = 2
        page.offset = 1
        XCTAssertEqual(try groups(page).map { $0["zone"] ?? "?" }, [nil, "Africa"])
        XCTAssertEqual(try store().count(page, scope: .unrestricted), 2)
        XCTAssertEqual(try store().count(request, scope: .unrestricted), 5)
        page.resultType = .count
        XCTAssertEqual(try store().fetch(page, scope: .unrestricted).count, 2)
    }

    func testHavingOverAggregatesAndGroupKeysWithArguments() throws {
        var request = FetchRequest(
            entity: "Team", arguments: ["least": 3], sort: [SortDescriptor(key: "zone")], groupBy: ["zone"],
            aggregates: [ExpressionDescription(name: "wins", function: .sum, key: "wins")],
            having: "wins >= $least AND zone != nil")
        XCTAssertEqual(try groups(request).map { $0["zone"] ?? "?" }, ["Africa", "Europe", "europe"])
        request.having = "zone BEGINSWITH[c] 'eu'"
        XCTAssertEqual(try groups(request).map { $0["wins"] ?? "?" }, [13, 3])
        XCTAssertEqual(try store().count(request, scope: .unrestricted), 2)
    }

    func testGroupsByAToOneKeyPathAndFiltersBeforeGrouping() throws {
        let rows = try groups(
            FetchRequest(
                entity: "Team", predicate: "active == YES", sort: [SortDescriptor(key: "country.name")],
                groupBy: ["country.name"],
                aggregates: [ExpressionDescription(name: "wins", function: .sum, key: "wins")],
                having: "country.name != '日本'"))
        // Active: A (France 3), C (日本 0), E (France 10), F (Côte d'Ivoire 3).
        XCTAssertEqual(rows, [["country.name": "Côte d'Ivoire", "wins": 3], ["country.name": "France", "wins": 13]])
    }

    func testAggregatesWithoutGroupByAreOneGroupAndNoObjectsNoGroups() throws {
        let totals = FetchRequest(
            entity: "Team",
            aggregates: [
                ExpressionDescription(name: "teams", function: .count),
                ExpressionDescription(name: "rated", function: .count, key: "rating"),
                ExpressionDescription(name: "best", function: .max, key: "rating"),
            ])
        XCTAssertEqual(try groups(totals), [["teams": 6, "rated": 5, "best": 3.0]])
        var none = totals
        none.predicate = "FALSEPREDICATE"
        XCTAssertEqual(try groups(none), [])
        XCTAssertEqual(try store().count(none, scope: .unrestricted), 0)
        var grouped = none
        grouped.groupBy = ["zone"]
        XCTAssertEqual(try groups(grouped), [])
    }

    func testStreamsGroupsInBatches() throws {
        var batches: [Int] = []
        let (count, _) = try store().fetchEncoded(
            FetchRequest(entity: "Team", batchSize: 2, groupBy: ["zone"]), scope: .unrestricted
        ) { batch in batches.append(batch.count) }
        XCTAssertEqual(count, 5)
        XCTAssertEqual(batches, [2, 2, 1])
    }

    func testBadGroupedRequestsNameTheField() throws {
        let count = ExpressionDescription(name: "n", function: .count)
        let cases: [(FetchRequest, String)] = [
            (FetchRequest(entity: "Team", groupBy: ["nope"]), "params.groupBy[0]"),
            (FetchRequest(entity: "Team", groupBy: ["country.nope"]), "params.groupBy[0]"),
            (FetchRequest(entity: "Team", groupBy: ["players"]), "params.groupBy[0]"),
            (FetchRequest(entity: "Team", groupBy: ["zone", "zone"]), "params.groupBy[1]"),
            (
                FetchRequest(
                    entity: "Team", aggregates: [ExpressionDescription(name: "s", function: .sum, key: "zone")]),
                "params.aggregates[0].key"
            ),
            (
                FetchRequest(
                    entity: "Team", aggregates: [ExpressionDescription(name: "s", function: .avg, key: "founded")]),
                "params.aggregates[0].key"
            ),
            (
                FetchRequest(entity: "Team", aggregates: [ExpressionDescription(name: "s", function: .max)]),
                "params.aggregates[0].key"
            ),
            (
                FetchRequest(entity: "Team", aggregates: [ExpressionDescription(name: "s", function: .min, key: "x")]),
                "params.aggregates[0].key"
            ),
            (FetchRequest(entity: "Team", aggregates: [count, count]), "params.aggregates[1].name"),
            (
                FetchRequest(
                    entity: "Team", groupBy: ["zone"],
                    aggregates: [ExpressionDescription(name: "zone", function: .count)]),
                "params.aggregates[0].name"
            ),
            (
                FetchRequest(entity: "Team", aggregates: [ExpressionDescription(name: "a.b", function: .count)]),
                "params.aggregates[0].name"
            ),
            (
                FetchRequest(entity: "Team", sort: [SortDescriptor(key: "wins")], groupBy: ["zone"]),
                "params.sort[0].key"
            ),
            (FetchRequest(entity: "Team", groupBy: ["zone"], having: "wins > 1"), "having"),
            (FetchRequest(entity: "Team", groupBy: ["zone"], having: "ANY zone == 'x'"), "having"),
            (FetchRequest(entity: "Team", aggregates: [count], having: "n == 'x'"), "having"),
            (FetchRequest(entity: "Team", resultType: .ids, groupBy: ["zone"]), "params.resultType"),
            (FetchRequest(entity: "Team", properties: ["zone"], groupBy: ["zone"]), "params.properties"),
            (FetchRequest(entity: "Team", groupBy: []), "params.groupBy"),
            (FetchRequest(entity: "Team", having: "TRUEPREDICATE"), "params.groupBy"),
            (FetchRequest(entity: "Team", limit: -1, groupBy: ["zone"]), "params.limit"),
            (FetchRequest(entity: "Team", predicate: "nope == 1", groupBy: ["zone"]), "predicate"),
        ]
        let store = try store()
        for (request, field) in cases {
            for call in [
                { _ = try store.fetch(request, scope: .unrestricted) },
                { _ = try store.count(request, scope: .unrestricted) },
            ] {
                XCTAssertThrowsError(try call(), "\(request)") { error in
                    let rpc = error as? RPCError
                    XCTAssertEqual(rpc?.code, .invalidParams, "\(request): \(error)")
                    XCTAssertEqual(rpc?.data?["field"], .string(field), "\(request): \(error)")
                }
            }
        }
    }

    func testAnUnknownFunctionIsRefusedWhenDecoded() {
        let json: JSONValue = ["entity": "Team", "aggregates": [["name": "m", "function": "median", "key": "wins"]]]
        XCTAssertThrowsError(try JSONCoding.decode(FetchRequest.self, from: json)) { error in
            let rpc = error as? RPCError
            XCTAssertEqual(rpc?.code, .invalidParams)
            XCTAssertEqual(rpc?.data?["field"], "params.aggregates[0].function")
            XCTAssertTrue(rpc?.message.contains("median") == true, "\(error)")
        }
    }

    func testObjectReadersRefuseGroupedRequests() throws {
        XCTAssertThrowsError(
            try FetchPlan(
                FetchRequest(entity: "Team", groupBy: ["zone"]), scope: .unrestricted, schema: store().schema,
                field: "params.request")
        ) { error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "params.request.groupBy")
        }
    }
}

extension GroupedFetchTests {
    func testFormatArgumentsGoToThePredicateFirstThenToHaving() throws {
        let request = FetchRequest(
            entity: "Team", predicate: "wins >= %d", arguments: [1, 10], sort: [SortDescriptor(key: "zone")],
            groupBy: ["zone"], aggregates: [ExpressionDescription(name: "wins", function: .sum, key: "wins")],
            having: "wins < %@")
        XCTAssertEqual(try groups(request).map { $0["zone"] ?? "?" }, ["Africa", "europe"])
        var tooMany = request
        tooMany.arguments = [1, 10, 3]
        XCTAssertThrowsError(try groups(tooMany)) { error in
            XCTAssertEqual((error as? RPCError)?.data?["field"], "arguments")
        }
    }
}

extension GroupedFetchTests {
    func testASumBeyond64BitsIsTheRequestsFaultInSQLAndInMemory() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "depot-grouped-overflow-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try Store(path: directory.appendingPathComponent("o.sqlite").path)
        _ = try store.defineModel(PredicateFixture.model)
        _ = try store.save(
            StoreSave.Parameters(
                inserted: ["a", "b"].map {
                    InsertedObject(entity: "Team", values: ["teamName": .string($0), "wins": .int(.max)])
                }), writeScope: .unrestricted)
        let request = FetchRequest(
            entity: "Team", aggregates: [ExpressionDescription(name: "wins", function: .sum, key: "wins")])
        for call in [
            { _ = try store.fetch(request, scope: .unrestricted) },
            { _ = try store.count(request, scope: .unrestricted) },
        ] {
            XCTAssertThrowsError(try call()) { error in
                XCTAssertEqual((error as? RPCError)?.code, .invalidParams, "\(error)")
                XCTAssertEqual((error as? RPCError)?.data?["field"], "params.aggregates")
            }
        }
        let (evaluator, teams) = try PredicateFixture.evaluator {
            try store.fetch($0, scope: .unrestricted).objects ?? []
        }
        XCTAssertThrowsError(
            try GroupedEvaluator(model: PredicateFixture.model, evaluator: evaluator).evaluate(
                request, objects: teams.compactMap(\.objectValue))
        ) { error in XCTAssertEqual(error as? RPCError, GroupedShape.sumOverflow) }
        var one = request
        one.predicate = "teamName == 'a'"
        XCTAssertEqual(try store.fetch(one, scope: .unrestricted).objects, [["wins": .int(.max)]])
    }
}
