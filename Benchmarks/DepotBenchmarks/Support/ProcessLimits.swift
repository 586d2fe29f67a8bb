import Foundation

/// This process's resource limits.
enum ProcessLimits {
    /// Raises the open-descriptor limit to its hard maximum: a thousand sessions are a thousand sockets.
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
