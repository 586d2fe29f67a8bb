import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

/// `depot backup DEST`: a consistent copy of a running daemon's store (`server/backup`).
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy the running daemon's store, consistently, into a directory (admin).",
        discussion: """
            DEST is a directory on the daemon's host (a relative path is taken from the current directory); \
            it is created if missing and must not hold a store yet. The copy is the store as of one \
            transaction, printed when done; `depotd --data-dir DEST` serves it. A daemon on a PostgreSQL \
            cluster refuses: back the cluster up with pg_dump (docs/cluster.md).
            """)

    @OptionGroup var connection: ConnectionOptions

    @Argument(help: "The directory to write the copy into.")
    var destination: String

    @Flag(help: "Print JSON (the server/backup result).")
    var json = false

    @Flag(help: "Print no progress on standard error.")
    var quiet = false

    func run() async throws {
        let path = URL(fileURLWithPath: destination).standardizedFileURL.path
        let client = try await connection.connect()
        defer { client.abort() }
        let token = JSONValue.string("backup-\(UUID().uuidString)")
        let notifications = client.notifications()
        let progress = Task {
            guard !quiet else { return }
            for await notification in notifications {
                guard let params = notification.decode(ProgressNotification.self), params.token == token,
                    let value = try? JSONCoding.decode(WorkDoneProgress.self, from: params.value),
                    value.kind == .report, let percentage = value.percentage
                else { continue }
                FileHandle.standardError.write(
                    Data(
                        String(
                            format: "backup: %.0f%% (%lld of %lld pages)\n", percentage, value.completed ?? 0,
                            value.total ?? 0
                        ).utf8))
            }
        }
        defer { progress.cancel() }
        let result: ServerBackup.Result
        do {
            // The copy takes as long as the store is big: progress, not the call's timeout, shows it is alive.
            result = try await client.call(
                ServerBackup.self, ServerBackup.Parameters(destination: path, workDoneToken: token),
                timeout: .seconds(7 * 24 * 3600))
        } catch {
            throw describe(error, calling: ServerBackup.name)
        }
        if json {
            print(jsonLine((try? JSONCoding.encode(result)) ?? .null))
        } else {
            print("backed up transaction \(result.transaction) to \(result.path) (\(result.sizeBytes) bytes)")
        }
    }
}
