import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Many-to-many relationships (DESIGN.md §4), over the wire: a to-many whose
/// inverse is to-many, kept in a join table; saves, properties, predicates,
/// history, delete rules, batches and fetched results.
final class ManyToManyTests: XCTestCase {
    static let post = EntityDescription(
        name: "Post", attributes: [AttributeDescription(name: "title", type: .string)],
        relationships: [RelationshipDescription(name: "tags", destination: "Tag", toMany: true, inverse: "posts")])
    static let tag = EntityDescription(
        name: "Tag", attributes: [AttributeDescription(name: "name", type: .string)],
        relationships: [RelationshipDescription(name: "posts", destination: "Post", toMany: true, inverse: "tags")])

    private func values(
        _ client: DepotConnection, _ ids: [String], _ properties: [String]
    ) async throws -> [[String: JSONValue]] {
        try await client.call(StoreGet.self, .init(ids: ids, properties: properties)).objects.map {
            $0.objectValue ?? [:]
        }
    }

    private func fetchIDs(
        _ client: DepotConnection, _ entity: String, _ predicate: String, _ arguments: JSONValue? = nil
    )
        async throws -> [String]
    {
        try await client.call(
            StoreFetch.self,
            FetchRequest(
                entity: entity, predicate: predicate, arguments: arguments,
                resultType: .ids)
        ).ids ?? []
    }

    func testDefineSaveFetchAndHistory() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        var post = Self.post
        post.relationships = []
        _ = try await client.call(ModelDefine.self, .init(entities: [post]))
        let first = try await client.call(
            StoreSave.self, .init(inserted: [InsertedObject(entity: "Post", tempId: "p1", values: ["title": "hello"])]))
        let p1 = try XCTUnwrap(first.ids["p1"])

        // Light migration: the relationship is added to a stored entity, with its new inverse entity.
        let migrated = try await client.call(ModelDefine.self, .init(entities: [Self.tag, Self.post]))
        XCTAssertEqual(migrated.changes.sorted(), ["added entity Tag", "added relationship Post.tags"])
        let model = try await client.call(ModelGet.self, Empty())
        XCTAssertEqual(model.entities.first { $0.name == "Post" }?.relationships, Self.post.relationships)
        var stored = try await values(client, [p1], ["title", "tags"])
        XCTAssertEqual(stored[0]["tags"], [])

        let notes = ChangeCollector(client)
        let observer = try await client.call(StoreObserve.self, .init())
        // Set from the post's side, with tempIds of tags inserted in the same save and a new post.
        let saved = try await client.call(
            StoreSave.self,
            .init(
                inserted: [
                    InsertedObject(entity: "Tag", tempId: "s", values: ["name": "swift"]),
                    InsertedObject(entity: "Tag", tempId: "z", values: ["name": "zmq"]),
                    InsertedObject(entity: "Post", tempId: "p2", values: ["title": "world", "tags": ["s"]]),
                ],
                updated: [UpdatedObject(id: p1, values: ["tags": ["z", "s"]])]))
        let (swift, zmq, p2) = (saved.ids["s"]!, saved.ids["z"]!, saved.ids["p2"]!)
        XCTAssertEqual(saved.versions[p1], 2, "the post's relationship changed: its version grows")
        stored = try await values(client, [p1, p2], ["tags"])
        XCTAssertEqual(stored[0]["tags"], .array([.string(swift), .string(zmq)]))
        XCTAssertEqual(stored[1]["tags"], .array([.string(swift)]))
        let tagSide = try await values(client, [swift, zmq], ["name", "posts"])
        XCTAssertEqual(tagSide[0]["posts"], .array([.string(p1), .string(p2)]))
        XCTAssertEqual(tagSide[1]["posts"], .array([.string(p1)]))
        var note = await notes.take { $0.method == DidSave.name }?.decode(DidSave.self)
        XCTAssertEqual(note?.observer, observer.observer)
        XCTAssertEqual(note?.changes["Post"]?.updated, [EntityChanges.Update(id: p1, keys: ["tags"])])
        XCTAssertEqual(Set(note?.changes["Tag"]?.inserted ?? []), [swift, zmq])

        // Set from the tag's side: p1 loses zmq, p2 gains it; both sides' keys are recorded.
        let moved = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: zmq, values: ["posts": [.string(p2)]])]))
        XCTAssertEqual(moved.versions[zmq], 2)
        XCTAssertEqual(moved.versions[p1], 3)
        XCTAssertEqual(moved.versions[p2], 2)
        note = await notes.take { $0.method == DidSave.name }?.decode(DidSave.self)
        XCTAssertEqual(note?.transaction, moved.transaction)
        XCTAssertEqual(
            Set(note?.changes["Post"]?.updated ?? []),
            [EntityChanges.Update(id: p1, keys: ["tags"]), EntityChanges.Update(id: p2, keys: ["tags"])])
        XCTAssertEqual(note?.changes["Tag"]?.updated, [EntityChanges.Update(id: zmq, keys: ["posts"])])
        let history = try await client.call(StoreHistory.self, .init(since: moved.transaction - 1))
        XCTAssertEqual(history.transactions.first?.changes, note?.changes)
        stored = try await values(client, [p1, p2], ["tags"])
        XCTAssertEqual(stored.map { $0["tags"] }, [.array([.string(swift)]), .array([.string(swift), .string(zmq)])])

        // Predicates through the relationship, on both sides; IN with a string on the right.
        var matched = try await fetchIDs(client, "Post", "ANY tags.name == 'swift'")
        XCTAssertEqual(matched, [p1, p2])
        matched = try await fetchIDs(client, "Post", "tags.@count == 2")
        XCTAssertEqual(matched, [p2])
        matched = try await fetchIDs(client, "Post", "SUBQUERY(tags, $t, $t.name BEGINSWITH 'z').@count == 1")
        XCTAssertEqual(matched, [p2])
        matched = try await fetchIDs(client, "Post", "NONE tags.name == 'zmq'")
        XCTAssertEqual(matched, [p1])
        matched = try await fetchIDs(client, "Tag", "posts.@count == 2")
        XCTAssertEqual(matched, [swift])
        matched = try await fetchIDs(client, "Post", "title IN[c] $text", ["text": "HELLO, Wörld!"])
        XCTAssertEqual(matched, [p1])
        matched = try await fetchIDs(client, "Post", "title IN[cd] $text", ["text": "HELLO, Wörld!"])
        XCTAssertEqual(matched, [p1, p2])
        matched = try await fetchIDs(client, "Post", "ANY tags.name IN 'zmq, rust'")
        XCTAssertEqual(matched, [p2])
        let dictionaries = try await client.call(
            StoreFetch.self,
            FetchRequest(
                entity: "Post", sort: [SortDescriptor(key: "title")], resultType: .dictionaries,
                properties: ["title", "tags"]))
        XCTAssertEqual(
            dictionaries.objects,
            [
                ["title": "hello", "tags": .array([.string(swift)])],
                ["title": "world", "tags": .array([.string(swift), .string(zmq)])],
            ])

        // Bad input names the key and changes nothing.
        let wrongEntity = await assertServerError(.validationFailed) {
            try await client.call(
                StoreSave.self, .init(updated: [UpdatedObject(id: p1, values: ["tags": [.string(p2)]])]))
        }
        XCTAssertEqual(wrongEntity?.data?["errors"]?.arrayValue?.first?["key"], "tags")
        XCTAssertEqual(wrongEntity?.data?["errors"]?.arrayValue?.first?["code"], "badReference")
        let notArray = await assertServerError(.validationFailed) {
            try await client.call(
                StoreSave.self, .init(updated: [UpdatedObject(id: p1, values: ["tags": .string(zmq)])]))
        }
        XCTAssertTrue(
            notArray?.data?["errors"]?.arrayValue?.first?["message"]?.stringValue?.contains("array of ids") == true)
        await assertServerError(.validationFailed) {
            try await client.call(StoreSave.self, .init(updated: [UpdatedObject(id: p1, values: ["tags": ["Tag/99"]])]))
        }
        stored = try await values(client, [p1], ["tags"])
        XCTAssertEqual(stored[0]["tags"], .array([.string(swift)]))

        // A relationship that is its own inverse is refused with the reason.
        let symmetric = await assertServerError(.invalidParams) {
            try await client.call(
                ModelDefine.self,
                .init(entities: [
                    EntityDescription(
                        name: "Person", attributes: [AttributeDescription(name: "name", type: .string)],
                        relationships: [
                            RelationshipDescription(
                                name: "friends", destination: "Person", toMany: true, inverse: "friends")
                        ])
                ]))
        }
        XCTAssertEqual(symmetric?.data?["field"], "entities[0].relationships[0].inverse")
        // Two relationships of one entity, each the other's inverse, work.
        _ = try await client.call(
            ModelDefine.self,
            .init(entities: [
                EntityDescription(
                    name: "Person", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [
                        RelationshipDescription(
                            name: "followers", destination: "Person", toMany: true, inverse: "following"),
                        RelationshipDescription(
                            name: "following", destination: "Person", toMany: true, inverse: "followers"),
                    ])
            ]))
        let people = try await client.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Person", tempId: "ann", values: ["name": "Ann"]),
                InsertedObject(entity: "Person", tempId: "bob", values: ["name": "Bob", "following": ["ann"]]),
            ]))
        let social = try await values(client, [people.ids["ann"]!, people.ids["bob"]!], ["followers", "following"])
        XCTAssertEqual(social[0]["followers"], .array([.string(people.ids["bob"]!)]))
        XCTAssertEqual(social[0]["following"], [])
        XCTAssertEqual(social[1]["following"], .array([.string(people.ids["ann"]!)]))
    }

    func testDeleteRulesAndBatches() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(
            ModelDefine.self,
            .init(entities: [
                Self.post, Self.tag,
                EntityDescription(
                    name: "Course", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [
                        RelationshipDescription(
                            name: "students", destination: "Student", toMany: true, inverse: "courses",
                            deleteRule: .deny)
                    ]),
                EntityDescription(
                    name: "Student", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [
                        RelationshipDescription(
                            name: "courses", destination: "Course", toMany: true, inverse: "students")
                    ]),
                EntityDescription(
                    name: "Playlist", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [
                        RelationshipDescription(
                            name: "songs", destination: "Song", toMany: true, inverse: "playlists", deleteRule: .cascade
                        )
                    ]),
                EntityDescription(
                    name: "Song", attributes: [AttributeDescription(name: "title", type: .string)],
                    relationships: [
                        RelationshipDescription(
                            name: "playlists", destination: "Playlist", toMany: true, inverse: "songs")
                    ]),
            ]))
        let saved = try await client.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Tag", tempId: "a", values: ["name": "alpha"]),
                InsertedObject(entity: "Tag", tempId: "b", values: ["name": "beta"]),
                InsertedObject(entity: "Tag", tempId: "z", values: ["name": "zeta"]),
                InsertedObject(entity: "Post", tempId: "p1", values: ["title": "one", "tags": ["a", "b", "z"]]),
                InsertedObject(entity: "Post", tempId: "p2", values: ["title": "two", "tags": ["b"]]),
                InsertedObject(entity: "Post", tempId: "p3", values: ["title": "three", "tags": ["z"]]),
                InsertedObject(entity: "Student", tempId: "s1", values: ["name": "Sam"]),
                InsertedObject(entity: "Course", tempId: "c1", values: ["name": "Math", "students": ["s1"]]),
                InsertedObject(entity: "Song", tempId: "x", values: ["title": "X"]),
                InsertedObject(entity: "Song", tempId: "y", values: ["title": "Y"]),
                InsertedObject(entity: "Playlist", tempId: "l1", values: ["name": "Mix", "songs": ["x", "y"]]),
                InsertedObject(entity: "Playlist", tempId: "l2", values: ["name": "Best", "songs": ["y"]]),
            ]))
        let id = saved.ids
        let notes = ChangeCollector(client)
        _ = try await client.call(StoreObserve.self, .init())

        // nullify: deleting a tag removes its pairs; the posts that held it change.
        let deleted = try await client.call(StoreSave.self, .init(deleted: [DeletedObject(id: id["b"]!)]))
        let note = await notes.take { $0.method == DidSave.name }?.decode(DidSave.self)
        XCTAssertEqual(note?.transaction, deleted.transaction)
        XCTAssertEqual(
            Set(note?.changes["Post"]?.updated ?? []),
            [EntityChanges.Update(id: id["p1"]!, keys: ["tags"]), EntityChanges.Update(id: id["p2"]!, keys: ["tags"])])
        var posts = try await values(client, [id["p1"]!, id["p2"]!], ["tags"])
        XCTAssertEqual(posts.map { $0["tags"] }, [.array([.string(id["a"]!), .string(id["z"]!)]), []])

        // deny: a course with students cannot go, and nothing changes; once empty it can.
        let denied = await assertServerError(.deleteDenied) {
            try await client.call(StoreSave.self, .init(deleted: [DeletedObject(id: id["c1"]!)]))
        }
        XCTAssertEqual(denied?.data?["objects"], .array([.string(id["s1"]!)]))
        var student = try await values(client, [id["s1"]!], ["courses"])
        XCTAssertEqual(student[0]["courses"], .array([.string(id["c1"]!)]))
        _ = try await client.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: id["s1"]!, values: ["courses": []])]))
        _ = try await client.call(StoreSave.self, .init(deleted: [DeletedObject(id: id["c1"]!)]))
        student = try await values(client, [id["s1"]!], ["courses"])
        XCTAssertEqual(student[0]["courses"], [])

        // cascade: deleting a playlist deletes its songs, which leave the other playlist too.
        let cascaded = try await client.call(StoreSave.self, .init(deleted: [DeletedObject(id: id["l1"]!)]))
        XCTAssertGreaterThan(cascaded.transaction, 0)
        let songs = try await client.call(StoreCount.self, FetchRequest(entity: "Song"))
        XCTAssertEqual(songs.count, 0)
        let best = try await values(client, [id["l2"]!], ["songs"])
        XCTAssertEqual(best[0]["songs"], [])
        let emptyLists = try await fetchIDs(client, "Playlist", "songs.@count == 0")
        XCTAssertEqual(emptyLists, [id["l2"]!])

        // batchUpdate sets the relationship of every match (replacing each set); batchDelete removes pairs.
        let updated = try await client.call(
            BatchUpdate.self,
            .init(entity: "Post", predicate: "title != 'one'", values: ["tags": .array([.string(id["a"]!)])]))
        XCTAssertEqual(updated.count, 2)
        posts = try await values(client, [id["p1"]!, id["p2"]!, id["p3"]!], ["tags"])
        XCTAssertEqual(
            posts.map { $0["tags"] },
            [.array([.string(id["a"]!), .string(id["z"]!)]), .array([.string(id["a"]!)]), .array([.string(id["a"]!)])])
        let alpha = try await values(client, [id["a"]!], ["posts"])
        XCTAssertEqual(alpha[0]["posts"], .array([.string(id["p1"]!), .string(id["p2"]!), .string(id["p3"]!)]))
        let removed = try await client.call(BatchDelete.self, .init(entity: "Tag", predicate: "name BEGINSWITH 'a'"))
        XCTAssertEqual(removed.count, 1)
        posts = try await values(client, [id["p1"]!, id["p2"]!, id["p3"]!], ["tags"])
        XCTAssertEqual(posts.map { $0["tags"] }, [.array([.string(id["z"]!)]), [], []])
        let untagged = try await fetchIDs(client, "Post", "tags.@count == 0")
        XCTAssertEqual(untagged.sorted(), [id["p2"]!, id["p3"]!].sorted())
        // Deleting a post removes its pairs on the tag's side.
        _ = try await client.call(StoreSave.self, .init(deleted: [DeletedObject(id: id["p1"]!)]))
        let zeta = try await values(client, [id["z"]!], ["posts"])
        XCTAssertEqual(zeta[0]["posts"], [])
        // batchInsert does not set to-many relationships, and says so.
        let refused = await assertServerError(.validationFailed) {
            try await client.call(
                BatchInsert.self,
                .init(entity: "Post", objects: [["title": "four", "tags": .array([.string(id["z"]!)])]]))
        }
        XCTAssertTrue(
            refused?.data?["errors"]?.arrayValue?.first?["message"]?.stringValue?.contains(
                "cannot be set by batchInsert")
                == true)
    }

    /// `{add, remove}` changes a set as it is when the save commits: two
    /// processes tagging one post at once lose nothing, without versions.
    func testAddAndRemoveForms() async throws {
        let daemon = try Daemon()
        let first = try await daemon.connect(name: "first")
        let second = try await daemon.connect(name: "second")
        _ = try await first.call(ModelDefine.self, .init(entities: [Self.post, Self.tag]))
        let saved = try await first.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Tag", tempId: "a", values: ["name": "a"]),
                InsertedObject(entity: "Tag", tempId: "b", values: ["name": "b"]),
                InsertedObject(entity: "Tag", tempId: "c", values: ["name": "c"]),
                InsertedObject(entity: "Post", tempId: "p", values: ["title": "p", "tags": ["a"]]),
            ]))
        let id = saved.ids
        let post = id["p"]!
        async let one = first.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: post, values: ["tags": ["add": [.string(id["b"]!)]]])]))
        async let two = second.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: post, values: ["tags": ["add": [.string(id["c"]!)]]])]))
        let (resultOne, resultTwo) = try await (one, two)
        XCTAssertGreaterThan(resultOne.transaction, 0)
        XCTAssertGreaterThan(resultTwo.transaction, 0)
        var tags = try await values(first, [post], ["tags"])[0]["tags"]
        XCTAssertEqual(tags, .array(["a", "b", "c"].map { .string(id[$0]!) }))

        // Add and remove at once, from the tag's side too; a tempId of the same save works.
        let changed = try await second.call(
            StoreSave.self,
            .init(
                inserted: [InsertedObject(entity: "Tag", tempId: "d", values: ["name": "d"])],
                updated: [
                    UpdatedObject(id: post, values: ["tags": ["add": ["d"], "remove": [.string(id["a"]!)]]]),
                    UpdatedObject(id: id["b"]!, values: ["posts": ["remove": [.string(post)]]]),
                ]))
        tags = try await values(first, [post], ["tags"])[0]["tags"]
        XCTAssertEqual(tags, .array([.string(id["c"]!), .string(changed.ids["d"]!)]))
        // Adding a member that is there and removing one that is not changes nothing.
        let unchanged = try await first.call(
            StoreSave.self,
            .init(updated: [
                UpdatedObject(id: post, values: ["tags": ["add": [.string(id["c"]!)], "remove": [.string(id["a"]!)]]])
            ]))
        XCTAssertEqual(unchanged.transaction, 0)
        // Any other shape is refused, naming the key and both forms; nothing changes.
        for bad: JSONValue in [["add": .string(id["a"]!)], ["put": []], [:], 3] {
            let error = await assertServerError(.validationFailed) {
                try await first.call(StoreSave.self, .init(updated: [UpdatedObject(id: post, values: ["tags": bad])]))
            }
            XCTAssertEqual(error?.data?["errors"]?.arrayValue?.first?["key"], "tags")
            XCTAssertTrue(
                error?.data?["errors"]?.arrayValue?.first?["message"]?.stringValue?.contains("\"remove\"") == true,
                error?.message ?? "")
        }
        tags = try await values(first, [post], ["tags"])[0]["tags"]
        XCTAssertEqual(tags, .array([.string(id["c"]!), .string(changed.ids["d"]!)]))
    }

    /// Fetched results whose predicate goes through a many-to-many relationship
    /// follow pair changes from either side and changes to the related objects; the delta oracle holds.
    func testFetchedResultsFollowPairs() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(ModelDefine.self, .init(entities: [Self.post, Self.tag]))
        let saved = try await client.call(
            StoreSave.self,
            .init(inserted: [
                InsertedObject(entity: "Tag", tempId: "swift", values: ["name": "swift"]),
                InsertedObject(entity: "Tag", tempId: "zmq", values: ["name": "zmq"]),
                InsertedObject(entity: "Tag", tempId: "sql", values: ["name": "sqlite"]),
                InsertedObject(entity: "Post", tempId: "a", values: ["title": "A", "tags": ["swift"]]),
                InsertedObject(entity: "Post", tempId: "b", values: ["title": "B", "tags": ["zmq"]]),
                InsertedObject(entity: "Post", tempId: "c", values: ["title": "C", "tags": ["swift", "sql"]]),
                InsertedObject(entity: "Post", tempId: "d", values: ["title": "D"]),
            ]))
        let id = saved.ids
        let collector = ChangeCollector(client)
        let requests: [(FetchRequest, String?)] = [
            (
                FetchRequest(
                    entity: "Post", predicate: "ANY tags.name == 'swift'", sort: [SortDescriptor(key: "title")]), nil
            ),
            (
                FetchRequest(
                    entity: "Post", predicate: "SUBQUERY(tags, $t, $t.name BEGINSWITH 's').@count >= 1",
                    sort: [SortDescriptor(key: "title", ascending: false)], properties: ["title", "tags"]), nil
            ),
            (FetchRequest(entity: "Post", sort: [SortDescriptor(key: "title")], properties: ["title", "tags"]), nil),
            (FetchRequest(entity: "Tag", predicate: "posts.@count >= 2", sort: [SortDescriptor(key: "name")]), "name"),
            (
                FetchRequest(entity: "Tag", predicate: "NONE posts.title == 'D'", sort: [SortDescriptor(key: "name")]),
                nil
            ),
        ]
        var mirrors: [ResultsMirror] = []
        for (request, section) in requests {
            let result = try await client.call(
                ResultsSubscribe.self, .init(request: request, sectionKeyPath: section, include: .all))
            mirrors.append(ResultsMirror(result, request: request, sectionKeyPath: section))
            try await mirrors.last!.assertMatchesFreshFetch(client)
        }
        enum Edit {
            case save(StoreSave.Parameters)
            case batchUpdate(BatchUpdate.Parameters)
            case batchDelete(BatchDelete.Parameters)
        }
        let edits: [Edit] = [
            .save(
                .init(updated: [
                    UpdatedObject(
                        id: id["d"]!, values: ["tags": .array(["swift", "zmq"].map { JSONValue.string(id[$0]!) })])
                ])),
            .save(.init(updated: [UpdatedObject(id: id["zmq"]!, values: ["posts": [.string(id["a"]!)]])])),  // from the tag's side
            .save(.init(updated: [UpdatedObject(id: id["swift"]!, values: ["name": "swiftlang"])])),  // a member's attribute
            .save(.init(updated: [UpdatedObject(id: id["swift"]!, values: ["name": "swift"])])),
            .save(.init(updated: [UpdatedObject(id: id["c"]!, values: ["tags": []])])),
            .save(.init(deleted: [DeletedObject(id: id["swift"]!)])),  // nullify from the member's side
            .save(
                .init(inserted: [
                    InsertedObject(entity: "Tag", tempId: "new", values: ["name": "swift"]),
                    InsertedObject(entity: "Post", values: ["title": "E", "tags": ["new", .string(id["zmq"]!)]]),
                ])),
            .batchUpdate(
                .init(entity: "Post", predicate: "title IN {'B', 'C'}", values: ["tags": [.string(id["sql"]!)]])),
            .save(.init(deleted: [DeletedObject(id: id["d"]!)])),
            .batchDelete(.init(entity: "Tag", predicate: "name BEGINSWITH 's'")),
        ]
        var delivered = 0
        for edit in edits {
            let transaction: Int64
            switch edit {
            case .save(let params): transaction = try await client.call(StoreSave.self, params).transaction
            case .batchUpdate(let params): transaction = try await client.call(BatchUpdate.self, params).transaction
            case .batchDelete(let params): transaction = try await client.call(BatchDelete.self, params).transaction
            }
            XCTAssertGreaterThan(transaction, 0)
            for index in mirrors.indices {
                // Every didChange of a transaction precedes the response: at most one per subscription, none stale.
                if try await mirrors[index].matchesFreshFetch(client) { continue }
                let change = try await collector.expect(for: mirrors[index].subscription)
                XCTAssertEqual(change.transaction, transaction, "subscription \(index)")
                mirrors[index].apply(change)
                delivered += 1
                try await mirrors[index].assertMatchesFreshFetch(client)
            }
        }
        // Nothing left over: no delta that the oracle did not need.
        try await Task.sleep(for: .milliseconds(200))
        let leftovers = collector.drain().compactMap { $0.decode(ResultsDidChange.self) }
        XCTAssertEqual(leftovers.map(\.subscription), [], "unexpected didChange")
        XCTAssertGreaterThanOrEqual(delivered, 20)
        for mirror in mirrors { try await mirror.assertMatchesFreshFetch(client) }
    }

    /// Random pair edits from either side, member renames, inserts and deletes:
    /// after each, every subscription through the relationship equals a fresh fetch.
    func testRandomPairEditsKeepTheOracle() async throws {
        let daemon = try Daemon()
        let client = try await daemon.connect()
        _ = try await client.call(ModelDefine.self, .init(entities: [Self.post, Self.tag]))
        var inserted: [InsertedObject] = []
        for index in 0..<6 {
            inserted.append(
                InsertedObject(entity: "Tag", tempId: "t\(index)", values: ["name": .string("n\(index % 3)")]))
        }
        for index in 0..<10 {
            inserted.append(
                InsertedObject(
                    entity: "Post", tempId: "p\(index)",
                    values: ["title": .string("T\(index)"), "tags": .array([.string("t\(index % 6)")])]))
        }
        let saved = try await client.call(StoreSave.self, .init(inserted: inserted))
        var posts = (0..<10).map { saved.ids["p\($0)"]! }
        var tags = (0..<6).map { saved.ids["t\($0)"]! }
        let collector = ChangeCollector(client)
        let requests = [
            FetchRequest(entity: "Post", predicate: "ANY tags.name == 'n1'", sort: [SortDescriptor(key: "title")]),
            FetchRequest(
                entity: "Post", predicate: "tags.@count >= 2", sort: [SortDescriptor(key: "title")],
                properties: ["title", "tags"]),
            FetchRequest(
                entity: "Tag", predicate: "SUBQUERY(posts, $p, $p.title BEGINSWITH 'T').@count BETWEEN {1, 3}",
                sort: [SortDescriptor(key: "name")],
                properties: ["name", "posts"]),
        ]
        var mirrors: [ResultsMirror] = []
        for request in requests {
            let result = try await client.call(ResultsSubscribe.self, .init(request: request, include: .all))
            mirrors.append(ResultsMirror(result, request: request, sectionKeyPath: nil))
        }
        var random = SystemRandomNumberGenerator()
        var counter = 0
        for _ in 0..<40 {
            counter += 1
            let post = posts.randomElement(using: &random)!
            let tag = tags.randomElement(using: &random)!
            let some = JSONValue.array(
                tags.shuffled(using: &random).prefix(Int.random(in: 0...3, using: &random)).map { .string($0) })
            let params: StoreSave.Parameters
            switch Int.random(in: 0..<8, using: &random) {
            case 0: params = .init(updated: [UpdatedObject(id: post, values: ["tags": some])])
            case 1: params = .init(updated: [UpdatedObject(id: post, values: ["tags": ["add": [.string(tag)]]])])
            case 2: params = .init(updated: [UpdatedObject(id: tag, values: ["posts": ["remove": [.string(post)]]])])
            case 3:
                params = .init(updated: [
                    UpdatedObject(
                        id: tag, values: ["posts": .array(posts.shuffled(using: &random).prefix(3).map { .string($0) })]
                    )
                ])
            case 4:
                params = .init(updated: [
                    UpdatedObject(id: tag, values: ["name": .string("n\(Int.random(in: 0..<3, using: &random))")])
                ])
            case 5 where tags.count > 2:
                tags.removeAll { $0 == tag }
                params = .init(deleted: [DeletedObject(id: tag)])
            case 6 where posts.count > 3:
                posts.removeAll { $0 == post }
                params = .init(deleted: [DeletedObject(id: post)])
            default:
                params = .init(inserted: [
                    InsertedObject(entity: "Tag", tempId: "nt", values: ["name": "n1"]),
                    InsertedObject(
                        entity: "Post", tempId: "np",
                        values: ["title": .string("T\(counter)x"), "tags": ["nt", .string(tag)]]),
                ])
            }
            let result = try await client.call(StoreSave.self, params)
            if let id = result.ids["nt"] { tags.append(id) }
            if let id = result.ids["np"] { posts.append(id) }
            for index in mirrors.indices {
                if try await mirrors[index].matchesFreshFetch(client) { continue }
                let change = try await collector.expect(for: mirrors[index].subscription)
                XCTAssertEqual(change.transaction, result.transaction)
                mirrors[index].apply(change)
                try await mirrors[index].assertMatchesFreshFetch(client)
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        XCTAssertEqual(collector.drain().compactMap { $0.decode(ResultsDidChange.self)?.subscription }, [])
        XCTAssertGreaterThan(mirrors.map(\.seq).reduce(0, +), 10)
    }
}
