import ArgumentParser

/// The entry point: moves connection options written before the subcommand
/// (`depot --connect EP call ping`, as `git -C` and `docker -H` take them) to
/// after it, where every subcommand's ``ConnectionOptions`` parses them.
@main
enum DepotMain {
    static func main() async {
        await Depot.main(GlobalOptions.hoisted(Array(CommandLine.arguments.dropFirst())))
    }
}

/// Options that may come before the subcommand.
enum GlobalOptions {
    /// Options of the root command itself (help, version, completion): a command
    /// line that starts with one of these is left as it is.
    static let rootOptions: Set<String> = [
        "-h", "--help", "--version", "--generate-completion-script", "--experimental-dump-help",
    ]

    /// Connection options that take no value (every one of ``ConnectionOptions`` takes one today).
    static let flags: Set<String> = []

    /// `arguments` with the options before the first subcommand name moved to
    /// the end (before a `--` terminator, when there is one).
    static func hoisted(_ arguments: [String]) -> [String] {
        var leading: [String] = []
        var index = arguments.startIndex
        while index < arguments.endIndex, arguments[index].hasPrefix("-"), arguments[index] != "--" {
            let option = arguments[index]
            let name = String(option.split(separator: "=", maxSplits: 1)[0])
            if rootOptions.contains(name) { return arguments }
            leading.append(option)
            index += 1
            if !option.contains("="), !flags.contains(name) {
                guard index < arguments.endIndex else { return arguments }  // A missing value: let the parser say so.
                leading.append(arguments[index])
                index += 1
            }
        }
        guard !leading.isEmpty, index < arguments.endIndex, arguments[index] != "--" else { return arguments }
        var rest = Array(arguments[index...])
        let end = rest.firstIndex(of: "--") ?? rest.endIndex
        rest.insert(contentsOf: leading, at: end)
        return rest
    }
}
