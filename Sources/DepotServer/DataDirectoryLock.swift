import Foundation

/// An exclusive `flock` on `<data-dir>/depotd.lock`, held while the daemon runs.
///
/// Two daemons on one data directory would share the SQLite file (WAL allows
/// it) but each would take the other's `depot.sock`; the second one is refused
/// at start-up instead, naming the first one's process id. The kernel releases
/// the lock when the process exits, however it exits.
final class DataDirectoryLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock or throws, naming the process that holds it.
    init(directory: URL) throws(ConfigurationError) {
        let path = directory.appendingPathComponent("depotd.lock").path
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw ConfigurationError(
                description:
                    "cannot use the data directory \(directory.path): \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = pread(descriptor, &buffer, buffer.count, 0)
            let holder = String(decoding: buffer.prefix(max(0, count)), as: UTF8.self)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            close(descriptor)
            throw ConfigurationError(
                description:
                    "the data directory \(directory.path) is in use by another depotd\(holder.isEmpty ? "" : " (pid \(holder))"); stop it or choose another --data-dir"
            )
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pwrite(descriptor, pid, pid.count, 0)
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }
}
