import CLibevent

/// Keeps other processes of the proxy's user out of its memory, environment and descriptors.
///
/// A `command:` secret's program (docs/credentials.md) gets a minimal environment and none of the
/// proxy's descriptors, but it runs as the proxy's user: while the proxy is dumpable, the program
/// could read `/proc/$PPID/environ` (every `env:` secret), `/proc/$PPID/fd/*` and, where ptrace is
/// allowed, `/proc/$PPID/mem`. A non-dumpable process's /proc entries belong to root and need
/// `CAP_SYS_PTRACE` to read (proc(5), prctl(2) `PR_SET_DUMPABLE`). Core dumps are off as a
/// consequence, which a process holding secrets wants anyway.
public enum ProcessInspection {
    /// Idempotent; true when the process is no longer dumpable.
    @discardableResult
    public static func forbid() -> Bool {
        _ = sp_forbid_inspection()
        return sp_is_dumpable() == 0
    }

    public static var isForbidden: Bool { sp_is_dumpable() == 0 }
}
