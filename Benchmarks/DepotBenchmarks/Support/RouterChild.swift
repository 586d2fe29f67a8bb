import Foundation

/// A plain libzmq ROUTER (``RawEchoServer``, backlog 4,096) in a child process of its
/// own: the baseline of memory per connection and of a connect storm, measured on a
/// process that holds nothing else. The child is this executable again (`--router-child`).
final class RouterChild {
    private let process = Process()
    private let input = Pipe()
    /// Where the ROUTER listens (`tcp://127.0.0.1:PORT`).
    let endpoint: String

    /// Starts the child and waits for its endpoint.
    init() throws {
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        if !FileManager.default.isExecutableFile(atPath: process.executableURL!.path) {
            process.executableURL = Bundle.main.executableURL
        }
        process.arguments = ["--router-child"]
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw BenchmarkError("the ROUTER child ended before it listened") }
            line += chunk
        }
        endpoint = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The child's process id.
    var pid: Int32 { process.processIdentifier }

    /// Ends the child (closes its standard input) and waits.
    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    /// The child's side: echo on a ROUTER until standard input closes.
    static func runChild() throws {
        ProcessLimits.raiseDescriptorLimit()
        let server = try RawEchoServer(endpoint: "tcp://127.0.0.1:*", backlog: 4096)
        FileHandle.standardOutput.write(Data("\(server.endpoint)\n".utf8))
        _ = FileHandle.standardInput.readDataToEndOfFile()
        server.stop()
    }
}
