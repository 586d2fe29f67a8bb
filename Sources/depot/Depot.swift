import ArgumentParser

/// `depot`: the command-line client of `depotd`.
@main
struct Depot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract: "Talk to a running depotd: call any method, watch live results, import paged JSON, manage the model.",
        discussion: """
            Output is for people by default; --json (where offered) prints JSON for scripts.
            Exit status: 0 success, 1 error (a message on standard error), 2 import finished with skipped input,
            130 interrupted.
            """,
        version: "0.1.0",
        subcommands: [
            Call.self, PingCommand.self, Watch.self, Import.self, ModelCommand.self, StatsCommand.self,
            StudioCommand.self,
        ])
}
