import DepotClient
import DepotProtocol
import Foundation

/// An error whose message is all a person needs.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Writes a line to standard error.
func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Parses a JSON argument (or standard input for `-`), naming the argument when it is not JSON.
func parseJSONArgument(_ text: String, what: String) throws -> JSONValue {
    let source = text == "-" ? String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self) : text
    do {
        return try JSONParser.parse(source)
    } catch {
        throw CLIError("\(what) is not valid JSON (\(error)): \(source.prefix(80))")
    }
}

/// Turns a failed call into a message: the server's error with its code, or the client's.
func describe(_ error: DepotClientError, calling method: String) -> CLIError {
    if let rpc = error.rpcError {
        var text = "\(method) failed: \(rpc.message) (\(rpc.code.rawValue))"
        if let data = rpc.data { text += " " + String(decoding: JSONWriter.encode(data), as: UTF8.self) }
        return CLIError(text)
    }
    return CLIError("\(method) failed: \(error)")
}

/// The standard JSON line for `--json` output.
func jsonLine(_ value: JSONValue) -> String {
    String(decoding: JSONWriter.encode(value), as: UTF8.self)
}
