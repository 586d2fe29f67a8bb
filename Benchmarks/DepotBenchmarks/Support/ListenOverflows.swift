import Foundation

/// The kernel's count of connections dropped because a listen queue was full
/// (`TcpExt: ListenOverflows` in `/proc/net/netstat`, this network namespace):
/// each is a SYN the client must send again, a second or more later.
enum ListenOverflows {
    /// The count now; `nil` when the kernel does not report it.
    static func count() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/net/netstat", encoding: .utf8) else { return nil }
        let lines = text.split(separator: "\n").filter { $0.hasPrefix("TcpExt:") }
        guard lines.count >= 2 else { return nil }
        let names = lines[0].split(separator: " ")
        let values = lines[1].split(separator: " ")
        guard let column = names.firstIndex(of: "ListenOverflows"), column < values.count else { return nil }
        return Int(values[column])
    }
}
