// The World Cup table from a local replica, with the daemon running or not (DESIGN.md §9).
//
//   make run                                         # terminal 1: the daemon
//   swift run WorldCupExample --seed --once          # the 32 teams, once
//   swift run OfflineExample --once                  # the table; fills ./depot-offline.sqlite
//   (stop the daemon: Ctrl-C in terminal 1)
//   swift run OfflineExample --once                  # cold start: the table from the file, no daemon
//   swift run OfflineExample --increment Brazil      # queued in the file, durably; waits for the daemon
//   make run                                         # terminal 1 again: the queued save replays, once
//
// The table comes from the file at once and catches up (only what changed) when the daemon
// answers; the edit is an ObjectContext save that, with no daemon, is queued in the same file and
// replayed with its saveId and merge policy as soon as the connection opens a session.

import ArgumentParser
import DepotClient
import Foundation

@main
struct OfflineExample: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Shows the World Cup teams from a local replica, or adds a win to a team, daemon or not.")

    @Option(help: "The daemon's endpoint.")
    var connect = "ipc://./depot-data/depot.sock"

    @Option(help: "The local replica file.")
    var store = "depot-offline.sqlite"

    @Option(help: "Add one win to this team (queued when the daemon is away) and exit once it is saved.")
    var increment: String?

    @Option(help: "With --increment: also insert a team of this name (zone Test) in the same save.")
    var addTeam: String?

    @Option(help: "The merge policy of --increment's save (error, objectTrump, storeTrump, overwrite, rollback).")
    var mergePolicy = "objectTrump"

    @Option(help: "How long to wait for the daemon, in seconds.")
    var wait = 120

    @Flag(help: "Draw the table once (from the file, and caught up when the daemon answers) and exit.")
    var once = false

    func run() async throws {
        // `open` returns at once, daemon or not; the session opens whenever it answers.
        let connection = try DepotConnection.open(
            to: connect, clientInfo: ImplementationInfo(name: "OfflineExample", version: "1"), timeout: .seconds(5))
        let file = URL(fileURLWithPath: store)
        if let increment {
            try await addWin(to: increment, connection: connection, file: file)
        } else {
            try await showTable(connection: connection, file: file)
        }
        await connection.close()
    }

    /// Adds a win in a context kept in `file`: saved at once with a session, else queued and replayed.
    private func addWin(to name: String, connection: DepotConnection, file: URL) async throws {
        let context = try ObjectContext(
            connection: connection, mergePolicy: MergePolicy(rawValue: mergePolicy) ?? .objectTrump,
            author: "OfflineExample", persistentStore: file)
        let request = FetchRequest(entityName: "Team", predicate: "teamName == %@", name)
        guard var team = try await context.fetch(request).first else {
            throw ValidationError(
                "no team named '\(name)' (with the daemon away, only teams read here before are known: run --once first)"
            )
        }
        let wins = (team.int("wins") ?? 0) + 1
        team["wins"] = .int(Int64(wins))
        if let addTeam {
            context.insert(entity: "Team", values: ["teamName": .string(addTeam), "qualifyingZone": "Test"])
        }
        let saved = try await context.save()
        guard saved.isPending else {
            say("\(name): \(wins) wins (saved, transaction \(saved.transaction))")
            return
        }
        say("\(name): \(wins) wins, queued in \(store) (saveId \(saved.saveId ?? "?")); waiting for the daemon…")
        let failures = context.failedSaves()
        let deadline = ContinuousClock.now + .seconds(wait)
        while ContinuousClock.now < deadline, try !context.pendingSaves().isEmpty {
            try await Task.sleep(for: .milliseconds(200))
        }
        if try !context.pendingSaves().isEmpty {
            say("the daemon did not come back: the save stays queued in \(store) for the next run")
        } else if let failure = await firstFailure(failures) {
            say("the daemon refused the replay: \(failure.error)")
            try context.dismissFailedSave(failure)
        } else {
            say("replayed: the daemon has it")
        }
    }

    /// Writes `line` to standard output at once (unbuffered, also into a pipe or a file: a program
    /// that then waits for the daemon has said so).
    private func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private func firstFailure(_ failures: AsyncStream<FailedSave>) async -> FailedSave? {
        await withTaskGroup(of: FailedSave?.self) { group in
            group.addTask {
                for await failure in failures { return failure }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .milliseconds(500))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @MainActor
    private func showTable(connection: DepotConnection, file: URL) async throws {
        let request = FetchRequest(
            entity: "Team",
            sortDescriptors: [
                SortDescriptor(key: "qualifyingZone"), SortDescriptor(key: "wins", ascending: false),
                SortDescriptor(key: "teamName"),
            ])
        let controller = FetchedResultsController<DepotObject>(
            fetchRequest: request, connection: connection, sectionNameKeyPath: "qualifyingZone",
            persistentStore: file)
        let changes = controller.changes()
        try await controller.performFetch()
        draw(controller, connection: connection)
        // Keep the teams in the file for --increment too (an ObjectContext's objects).
        let context = try ObjectContext(connection: connection, persistentStore: file)
        if connection.state == .connected { _ = try? await context.fetch(FetchRequest(entity: "Team")) }
        if once {
            // Caught up already, or the daemon is away: the file's table is what there is.
            if controller.subscription == nil, connection.state == .connected {
                _ = await first(changes, within: .seconds(5))
                draw(controller, connection: connection)
            }
            return
        }
        for await _ in changes { draw(controller, connection: connection) }
    }

    private func first<Element: Sendable>(_ stream: AsyncStream<Element>, within timeout: Duration) async -> Element? {
        await withTaskGroup(of: Element?.self) { group in
            group.addTask {
                for await element in stream { return element }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    private func draw(_ controller: FetchedResultsController<DepotObject>, connection: DepotConnection) {
        let source =
            controller.subscription == nil
            ? "from \(store) (daemon: \(connection.state))"
            : "live\(controller.lastCatchUp.map { $0.resynced ? ", resynced in full" : ", caught up fetching \($0.objectsFetched) objects" } ?? "")"
        var lines = ["World Cup — \(source)"]
        for section in controller.sections ?? [] {
            lines.append(" \(section.name)")
            for team in section.objects {
                let name = (team.string("teamName") ?? "?").padding(toLength: 24, withPad: " ", startingAt: 0)
                lines.append("   \(name) \(team.int("wins") ?? 0)")
            }
        }
        FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }
}
