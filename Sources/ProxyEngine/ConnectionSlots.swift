import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The process-wide budget of client connections (`limits.max_connections`), shared by every
/// worker: a slot is taken when a connection is accepted and given back when it closes.
final class ConnectionSlots: Sendable {
    let limit: Int
    private let open = Atomic<Int>(0)

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Takes a slot unless all are taken.
    func acquire() -> Bool {
        var current = open.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = open.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func release() {
        open.subtract(1, ordering: .relaxed)
    }
}

/// Raises the soft descriptor limit to the hard one (each client connection may hold a second
/// descriptor upstream) and returns the soft limit in force, so the caller can warn when the
/// connection limit cannot be met.
func raiseDescriptorLimit() -> Int {
    var limits = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return -1 }
    if limits.rlim_cur < limits.rlim_max {
        var raised = limits
        raised.rlim_cur = limits.rlim_max
        if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limits = raised }
    }
    return limits.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limits.rlim_cur)
}
