// The World Cup table in a terminal, kept live by a FetchedResultsController.
//
//   make run                                               # terminal 1: the daemon
//   swift run WorldCupExample --seed                       # terminal 2: the table (adds missing teams of the 32)
//   swift run WorldCupExample --increment Brazil           # terminal 3: Brazil wins a match
//
// Terminal 2 redraws from the delegate's callbacks each time any process saves.

import ArgumentParser
import DepotClient
import Foundation

@main
struct WorldCupExample: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Shows the World Cup teams by qualifying zone, live; or increments a team's wins.")

    @Option(help: "The daemon's endpoint.")
    var connect = "ipc://./depot-data/depot.sock"

    @Option(help: "Add one win to this team and exit.")
    var increment: String?

    @Flag(help: "Insert the fixture's teams the store does not have yet (by name) first.")
    var seed = false

    @Option(help: "The teams to seed from.")
    var fixture = "Tests/Fixtures/worldcup.json"

    @Flag(help: "Draw the table once and exit (no live updates).")
    var once = false

    func run() async throws {
        let connection = try await DepotConnection.connect(
            to: connect, clientInfo: ImplementationInfo(name: "WorldCupExample", version: "1"))
        if seed { try await seedTeams(connection) }
        if let increment {
            try await incrementWins(of: increment, connection: connection)
            await connection.close()
            return
        }
        try await showTable(connection)
    }

    private func seedTeams(_ connection: DepotConnection) async throws {
        let fixture = try JSONParser.parse(Array(Data(contentsOf: URL(fileURLWithPath: fixture))))
        if try await connection.call(ModelGet.self, Empty()).entities.isEmpty,
            let entities = fixture["model"]?["entities"]
        {
            _ = try await connection.call(
                ModelDefine.self, .init(entities: JSONCoding.decode([EntityDescription].self, from: entities)))
        }
        let context = ObjectContext(connection: connection, author: "WorldCupExample")
        let known = Set(try await context.fetch(FetchRequest(entity: "Team")).compactMap { $0.string("teamName") })
        for values in (fixture["teams"]?.arrayValue ?? []).compactMap(\.objectValue)
        where !known.contains(values["teamName"]?.stringValue ?? "") {
            context.insert(entity: "Team", values: values)
        }
        try await context.save()
    }

    /// Adds a win in a unit of work; on a conflict with another process's save, starts over.
    private func incrementWins(of name: String, connection: DepotConnection) async throws {
        let context = ObjectContext(connection: connection, author: "WorldCupExample")
        for _ in 0..<5 {
            context.reset()
            let request = FetchRequest(entityName: "Team", predicate: "teamName == %@", name)
            guard var team = try await context.fetch(request).first else {
                throw ValidationError("no team named '\(name)'")
            }
            let wins = (team.int("wins") ?? 0) + 1
            team["wins"] = .int(Int64(wins))  // the change, registered in the context
            if try await saveUnlessConflicting(context) {
                print("\(name): \(wins) wins")
                return
            }
        }
        throw ValidationError("gave up after five conflicting saves")
    }

    /// Saves; `false` when another process changed the team first (-32012).
    private func saveUnlessConflicting(_ context: ObjectContext) async throws(DepotClientError) -> Bool {
        do {
            try await context.save()
            return true
        } catch {
            if error.rpcError?.code == .mergeConflict { return false }
            throw error
        }
    }

    @MainActor
    private func showTable(_ connection: DepotConnection) async throws {
        let request = FetchRequest(
            entity: "Team",
            sortDescriptors: [
                SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false),
                SortDescriptor(key: "teamName"),
            ])
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone",
            cacheName: "worldcup-example")
        let table = TeamTable()
        controller.delegate = table
        try await controller.performFetch()
        table.draw(controller)
        if once { return }
        // The delegate does the rest, on the main actor; wait for Ctrl-C.
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
}

/// Draws the table, and redraws it after each change with the change's lines underneath.
@MainActor
final class TeamTable {
    private var log: [String] = []

    func draw(_ controller: any FetchedResultsControlling) {
        var lines = ["\u{1B}[2J\u{1B}[H World Cup — live from depotd (Ctrl-C to quit)", ""]
        for (section, info) in controller.sectionInfos.enumerated() {
            lines.append(" \(info.name)")
            for item in 0..<info.numberOfObjects {
                guard let team = controller.anyObject(at: IndexPath(item: item, section: section)) as? DepotObject
                else { continue }
                let name = (team.string("teamName") ?? "?").padding(toLength: 24, withPad: " ", startingAt: 0)
                lines.append("   \(name) \(team.int("wins") ?? 0)")
            }
        }
        lines.append("")
        lines += log.suffix(8)
        // Written straight to the descriptor: print() would sit in a buffer when piped.
        FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }
}

extension TeamTable: FetchedResultsControllerDelegate {
    func controllerWillChangeContent(_ controller: any FetchedResultsControlling) {
        log.append("— change —")
    }

    func controller(
        _ controller: any FetchedResultsControlling, didChange sectionInfo: any FetchedResultsSectionInfo,
        atSectionIndex sectionIndex: Int,
        for type: FetchedResultsChangeType
    ) {
        log.append("  section \(type) \(sectionIndex) \(sectionInfo.name)")
    }

    func controller(
        _ controller: any FetchedResultsControlling, didChange anObject: Any, at indexPath: IndexPath?,
        for type: FetchedResultsChangeType,
        newIndexPath: IndexPath?
    ) {
        let name = (anObject as? DepotObject)?.string("teamName") ?? "?"
        let from = indexPath.map { "[\($0.section), \($0.item)]" } ?? ""
        let to = newIndexPath.map { "[\($0.section), \($0.item)]" } ?? ""
        log.append("  \(type) \(name) \(from) → \(to)")
    }

    func controllerDidChangeContent(_ controller: any FetchedResultsControlling) {
        draw(controller)
    }

    func controllerDidReloadContent(_ controller: any FetchedResultsControlling) {
        log.append("— reloaded —")
        draw(controller)
    }
}
