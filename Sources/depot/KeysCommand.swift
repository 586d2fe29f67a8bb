import ArgumentParser
import DepotClient
import Foundation

/// `depot keys`: CURVE keys for `depotd --curve-secret-key` and `--authorized-keys`.
struct KeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys", abstract: "Make CURVE key pairs for the daemon and its clients.",
        subcommands: [Generate.self])

    /// `depot keys generate NAME`.
    struct Generate: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "generate",
            abstract: "Write NAME.key (the secret key, mode 0600) and NAME.pub (the public key).",
            discussion: """
                For the daemon: depotd --curve-secret-key server.key --authorized-keys authorized_keys
                For a client: add '<contents of NAME.pub> read|write|admin NAME' to authorized_keys
                (then SIGHUP the daemon), and connect with --server-key server.pub --key NAME.key.
                """)

        @Argument(help: "The key's name (and path prefix): writes NAME.key and NAME.pub.")
        var name: String

        @Flag(help: "Overwrite existing files.")
        var force = false

        func run() throws {
            let secretPath = name + ".key"
            let publicPath = name + ".pub"
            if !force {
                for path in [secretPath, publicPath] where FileManager.default.fileExists(atPath: path) {
                    throw CLIError("\(path) exists; use --force to replace it")
                }
            }
            let pair: (publicKey: String, secretKey: String)
            do {
                pair = try ClientKeys.generatePair()
            } catch {
                throw CLIError("cannot generate a key pair: \(error) (libzmq needs CURVE support)")
            }
            try write(
                "# Depot CURVE secret key '\(name)': keep it private.\n\(pair.secretKey)\n", to: secretPath, mode: 0o600
            )
            try write("# Depot CURVE public key '\(name)'\n\(pair.publicKey)\n", to: publicPath, mode: 0o644)
            print("wrote \(secretPath) (secret, mode 0600) and \(publicPath)")
            print("public key: \(pair.publicKey)")
        }

        /// Creates `path` with `mode` from the start (the secret is never readable by others).
        private func write(_ text: String, to path: String, mode: mode_t) throws {
            unlink(path)
            let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
            guard descriptor >= 0 else { throw CLIError("cannot write \(path): \(String(cString: strerror(errno)))") }
            defer { close(descriptor) }
            _ = fchmod(descriptor, mode)
            let bytes = Array(text.utf8)
            guard Foundation.write(descriptor, bytes, bytes.count) == bytes.count else {
                throw CLIError("cannot write \(path): \(String(cString: strerror(errno)))")
            }
        }
    }
}
