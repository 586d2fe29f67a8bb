import ArgumentParser

/// `depot`: the command-line client of `depotd` (started by ``DepotMain``).
struct Depot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract:
            "Talk to a running depotd: call any method, fetch, export and import objects, watch live results, manage the model.",
        discussion: """
            Connection options (--connect, --data-dir, --timeout) go before or after the subcommand:
              depot --connect tcp://127.0.0.1:7000 fetch Team --sort wins:desc
              depot fetch Team --sort wins:desc --connect tcp://127.0.0.1:7000
            Shell completion:
              depot --generate-completion-script bash > /etc/bash_completion.d/depot   (or zsh, fish)
            Output is for people by default; --json (where offered) prints JSON for scripts.
            Exit status: 0 success, 1 error (a message on standard error), 2 import finished with skipped input,
            130 interrupted.
            """,
        version: "0.1.0",
        subcommands: [
            Call.self, PingCommand.self, Fetch.self, Export.self, Watch.self, Import.self, ModelCommand.self,
            KeysCommand.self, StatsCommand.self, StudioCommand.self, BackupCommand.self,
        ])
}
