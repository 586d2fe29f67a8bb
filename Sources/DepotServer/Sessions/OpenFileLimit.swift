import Foundation

/// The process's open-file limit (`RLIMIT_NOFILE`) and how many sessions it affords.
///
/// Every session holds one connection, one descriptor; past the limit libzmq
/// cannot accept, and a client would wait unanswered. So the daemon raises its
/// soft limit as far as the hard limit allows and, when that is still too low
/// for `--max-sessions`, serves fewer sessions and says so.
public struct OpenFileLimit: Sendable, Hashable {
    /// The soft limit in force.
    public var soft: Int
    /// The hard limit (the most the soft one can be raised to without privileges).
    public var hard: Int

    /// Descriptors kept for what is not a session: SQLite readers opened later, backups, logs.
    static let spare = 64

    /// `RLIM_INFINITY` (Glibc's macro does not import into Swift).
    private static let unlimited = rlim_t.max

    /// The limit in force now.
    public static func current() -> OpenFileLimit {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        return OpenFileLimit(soft: clamp(limit.rlim_cur), hard: clamp(limit.rlim_max))
    }

    /// Raises the soft limit to the hard one (or to the kernel's `nr_open` when the hard one is unlimited).
    ///
    /// - Returns: the limit in force afterwards.
    @discardableResult
    public static func raiseSoftLimit() -> OpenFileLimit {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return current() }
        var target = limit.rlim_max
        if target == Self.unlimited {
            let open = (try? String(contentsOfFile: "/proc/sys/fs/nr_open", encoding: .utf8))
                .flatMap { rlim_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            target = open ?? 1 << 20
        }
        if limit.rlim_cur != Self.unlimited && limit.rlim_cur < target {
            limit.rlim_cur = target
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return current()
    }

    /// How many descriptors the process has open now.
    public static var openDescriptors: Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }

    /// How many sessions the soft limit affords with `openNow` descriptors already open:
    /// one descriptor each, after ``spare`` for the store and one in sixteen kept for
    /// connections that are not sessions yet (handshakes, clients refused with -32017).
    public func sessionsServable(openNow: Int) -> Int {
        max(0, (soft - openNow - Self.spare) * 15 / 16)
    }

    private static func clamp(_ value: rlim_t) -> Int {
        value == Self.unlimited || value > rlim_t(Int.max) ? Int.max : Int(value)
    }
}
