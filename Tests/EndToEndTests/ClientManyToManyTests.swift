import DepotClient
import DepotProtocol
import DepotTestSupport
import Foundation
import XCTest

/// Many-to-many relationships through ``ObjectContext`` and ``DepotObject``:
/// to-many values are arrays of ids; set whole, or added to and removed from
/// (`{add, remove}`, which concurrent writers cannot lose).
final class ClientManyToManyTests: XCTestCase {
    private func tags(_ connection: DepotConnection, of id: String, key: String = "tags") async throws -> Set<String> {
        let objects = try await connection.call(StoreGet.self, .init(ids: [id], properties: [key])).objects
        return Set(objects.first?[key]?.arrayValue?.compactMap(\.stringValue) ?? [])
    }

    func testContextSetsAddsAndRemovesMembers() async throws {
        let daemon = try Daemon()
        defer { daemon.stop() }
        let connection = try await daemon.connect(name: "app")
        let other = try await daemon.connect(name: "other")
        _ = try await connection.call(ModelDefine.self, .init(entities: [ManyToManyTests.post, ManyToManyTests.tag]))
        let context = ObjectContext(connection: connection)

        // Insert tags and a post naming them by temporary id: the whole set.
        var tagObjects: [DepotObject] = []
        for name in ["a", "b", "c", "d"] {
            var tag = DepotObject.insertNewObject(forEntityName: "Tag", into: context)
            tag["name"] = .string(name)
            tagObjects.append(tag)
        }
        var post = DepotObject.insertNewObject(forEntityName: "Post", into: context)
        post["title"] = "hello"
        post.setObjectIDs([tagObjects[0].id, tagObjects[1].id], forKey: "tags")
        XCTAssertEqual(post.objectIDs("tags"), [tagObjects[0].id, tagObjects[1].id])
        let saved = try await context.save()
        let (a, b, c, d) = (
            saved.ids[tagObjects[0].id]!, saved.ids[tagObjects[1].id]!, saved.ids[tagObjects[2].id]!,
            saved.ids[tagObjects[3].id]!
        )
        let postID = try XCTUnwrap(saved.ids[post.id])
        var stored = try await tags(connection, of: postID)
        XCTAssertEqual(stored, [a, b])
        let inverse = try await tags(connection, of: a, key: "posts")
        XCTAssertEqual(inverse, [postID], "the inverse side follows")
        XCTAssertEqual(
            Set(context.registeredObject(withID: postID)?.objectIDs("tags") ?? []), [a, b],
            "after the save the context shows the set with permanent ids")

        // Read with properties naming the relationship: an array of ids.
        let withoutProperties = try await ObjectContext(connection: connection).fetch(
            FetchRequest(entity: "Post", sortDescriptors: []))
        XCTAssertNil(withoutProperties[0].objectIDs("tags"), "to-many values come when properties name them")
        var request = FetchRequest(entity: "Post", sortDescriptors: [SortDescriptor(key: "title")])
        request.properties = ["title", "tags"]
        var fetched = try await context.fetch(request)[0]
        XCTAssertEqual(Set(fetched.objectIDs("tags") ?? []), [a, b])

        // Add and remove through the object; another process adds meanwhile, and nothing is lost.
        fetched.addObjectIDs([c], forKey: "tags")
        fetched.removeObjectIDs([a], forKey: "tags")
        XCTAssertEqual(Set(fetched.objectIDs("tags") ?? []), [b, c], "the object shows the change at once")
        XCTAssertEqual(Set(context.registeredObject(withID: postID)?.objectIDs("tags") ?? []), [b, c])
        XCTAssertTrue(context.hasChanges)
        XCTAssertEqual(context.updatedObjects.map(\.id), [postID])
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: postID, values: ["tags": ["add": [.string(d)]]])]))
        try await context.save()  // mergePolicy .error: additions and removals do not conflict
        stored = try await tags(connection, of: postID)
        XCTAssertEqual(stored, [b, c, d])
        XCTAssertEqual(Set(context.registeredObject(withID: postID)?.objectIDs("tags") ?? []), [b, c, d])
        XCTAssertFalse(context.hasChanges)
        // A fetch without the relationship keeps the set the context knows while the version is the same…
        var refetched = try await context.fetch(FetchRequest(entity: "Post", sortDescriptors: []))
        XCTAssertEqual(Set(refetched[0].objectIDs("tags") ?? []), [b, c, d])
        // …and forgets it once the object changed elsewhere (the set may have changed with it).
        _ = try await other.call(
            StoreSave.self, .init(updated: [UpdatedObject(id: postID, values: ["tags": ["remove": [.string(b)]]])]))
        refetched = try await context.fetch(FetchRequest(entity: "Post", sortDescriptors: []))
        XCTAssertNil(refetched[0].objectIDs("tags"))
        refetched = try await context.fetch(request)
        XCTAssertEqual(Set(refetched[0].objectIDs("tags") ?? []), [c, d])

        // Added then removed before the save: the later word wins.
        fetched = try XCTUnwrap(context.registeredObject(withID: postID))
        fetched.addObjectIDs([a], forKey: "tags")
        fetched.removeObjectIDs([a, b], forKey: "tags")
        try await context.save()
        stored = try await tags(connection, of: postID)
        XCTAssertEqual(stored, [c, d])

        // Set whole from the tag's side.
        let loadedD = try await context.object(with: d)
        var tagD = try XCTUnwrap(loadedD)
        tagD.setObjectIDs([], forKey: "posts")
        try await context.save()
        stored = try await tags(connection, of: postID)
        XCTAssertEqual(stored, [c])
        let postsOfD = try await tags(connection, of: d, key: "posts")
        XCTAssertEqual(postsOfD, [])

        // A plain value keeps the change in the shape a save takes; a context sends it.
        var plain = DepotObject(id: postID, entity: "Post")
        plain.addObjectIDs([a, b], forKey: "tags")
        plain.removeObjectIDs([b], forKey: "tags")
        XCTAssertEqual(plain["tags"], ["add": [.string(a)], "remove": [.string(b)]])
        let fresh = ObjectContext(connection: connection)
        fresh.update(plain)
        try await fresh.save()
        stored = try await tags(connection, of: postID)
        XCTAssertEqual(stored, [a, c])
        // …and a plain value that carries the set changes the set.
        var carried = DepotObject(id: postID, entity: "Post", values: ["tags": .array([.string(a)])])
        carried.addObjectIDs([d], forKey: "tags")
        XCTAssertEqual(carried.objectIDs("tags"), [a, d])
    }
}
