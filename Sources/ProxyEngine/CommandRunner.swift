import CLibevent
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// Runs one `command:` secret's program on a worker's loop and collects what it printed: spawned
/// with posix_spawn (argv, no shell; no fork of a process with threads), in a process group of its
/// own (so a timeout kills what it started too), stdin from /dev/null, stdout and stderr read from
/// non-blocking pipes with libevent, and no other descriptor of the proxy (its sockets, its secret
/// files) open in the child: the child closes every descriptor from 3 up before exec.
///
/// Its exit is watched with a pidfd (readable once the child exited, Linux 5.3), or where that is
/// refused with a `waitid(WNOWAIT)` poll: never a process-wide SIGCHLD handler, and never a
/// blocking wait on the loop. The child is left a zombie until the runner decided, so its pid and
/// its process group's id cannot be reused before the group is killed; then it is reaped. A runner
/// that ends early (timeout, output limit, `cancel`, deinit) kills the group and reaps the child
/// when it is gone, on the loop: no zombie is ever left behind.
///
/// `finish` is called exactly once, on the loop (before `start` returns when the program cannot be
/// started), unless `cancel` comes first. Exit 0 is success with whatever stdout held (the caller
/// reads it with `CommandOutput.parse`).
final class CommandRunner {
    struct Output: Sendable, Equatable {
        let stdout: [UInt8]
        /// Bounded and printable (`CommandStandardError`), scrubbed by `stderrScrub`.
        let stderrFirstLine: String?
    }

    typealias Outcome = Result<Output, CommandRunFailure>

    static let defaultOutputLimit = 64 * 1024
    /// What is read from a pipe per wakeup: a child writing without pause must not hold the loop.
    private static let readsPerWakeup = 4
    private static let readChunk = 16 * 1024
    /// What a standard error still open after the child exited is read for (its first line is
    /// all that is kept): a grandchild writing without pause must not hold the loop.
    private static let stderrDrainLimit = 1024 * 1024

    private let worker: Worker
    private let argv: [String]
    private let environment: [String: String]
    private let timeoutMilliseconds: Int
    private let outputLimit: Int
    private let pollForExit: Bool
    /// Replaces secret values in stderr's first line before it is cut and made printable.
    private let stderrScrub: ([UInt8]) -> [UInt8]

    private var finish: ((Outcome) -> Void)?
    private var child: ChildProcess?
    private var stdoutPipe: PipeEnd?
    private var stderrPipe: PipeEnd?
    private var stdout: [UInt8] = []
    private var stderr = CommandStandardError()
    private var timer: OpaquePointer?
    private var isFinished = false

    /// `environment` is all the child gets (`CommandEnvironment.minimal`); its PATH, not the
    /// proxy's, finds a program named without a `/`. `pollForExit` forces the waitid fallback
    /// (tests).
    init(
        worker: Worker, argv: [String], environment: [String: String], timeoutMilliseconds: Int,
        outputLimit: Int = CommandRunner.defaultOutputLimit, pollForExit: Bool = false,
        stderrScrub: @escaping ([UInt8]) -> [UInt8] = { $0 }
    ) {
        self.stderrScrub = stderrScrub
        self.worker = worker
        self.argv = argv
        self.environment = environment
        self.timeoutMilliseconds = max(1, timeoutMilliseconds)
        self.outputLimit = max(0, outputLimit)
        self.pollForExit = pollForExit
    }

    deinit { release() }

    /// The child's pid (and process group id) while it runs; for tests and diagnostics.
    var processID: pid_t? { child?.pid }

    func start(finish: @escaping (Outcome) -> Void) {
        // Once only, and not after `cancel`: a second start is a caller's bug, ignored (not a trap).
        guard self.finish == nil, !isFinished else {
            assertionFailure("CommandRunner.start called twice or after cancel")
            return
        }
        self.finish = finish
        let spawned: SpawnedChild
        switch Spawn.start(argv: argv, environment: environment) {
        case .success(let child): spawned = child
        case .failure(let failure):
            end(.failure(failure))
            return
        }
        let base = worker.base
        child = ChildProcess(pid: spawned.pid, base: base, poll: pollForExit)
        stdoutPipe = PipeEnd(fd: spawned.stdoutFD, base: base, owner: self)
        stderrPipe = PipeEnd(fd: spawned.stderrFD, base: base, owner: self)
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(
            base, -1, 0,
            { _, _, context in
                let runner = Unmanaged<CommandRunner>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(runner) { runner.timedOut() }
            }, context)
        guard let timer else {
            // No timer, no bound on the run: refuse to run unbounded (the child is killed, reaped).
            end(.failure(.notStarted("cannot arm the timeout")))
            return
        }
        sp_event_add_ms(timer, timeoutMilliseconds)
        child?.watch { [unowned self] in self.childExited() }
    }

    /// Stops everything: the process group is killed (and its leader reaped once gone); `finish`
    /// is not called.
    func cancel() {
        finish = nil
        release()
    }

    /// `cancel` for a loop about to stop: no event will ever tell that the killed child is gone, so
    /// it is reaped here (a SIGKILLed process exits at once; the fetcher's thread, not a worker,
    /// waits that moment). Without it the child stays a zombie for the life of the proxy.
    func cancelBeforeLoopStops() {
        finish = nil
        let child = self.child
        self.child = nil
        release()
        if let child {
            child.killGroup()
            _ = child.reap()
        }
    }

    // MARK: Reading

    fileprivate func readable(_ pipe: PipeEnd) {
        read(pipe, reads: Self.readsPerWakeup)
    }

    /// Reads up to `reads` chunks (stdout never beyond the limit plus the one byte that tells).
    private func read(_ pipe: PipeEnd, reads: Int) {
        var chunk = [UInt8](repeating: 0, count: Self.readChunk)
        for _ in 0..<reads {
            guard !isFinished, pipe.isOpen else { return }
            let isStdout = pipe === stdoutPipe
            let room = isStdout ? min(chunk.count, outputLimit + 1 - stdout.count) : chunk.count
            let count = chunk.withUnsafeMutableBytes { Glibc.read(pipe.fd, $0.baseAddress, room) }
            if count > 0 {
                if isStdout {
                    stdout += chunk[0..<count]
                    if stdout.count > outputLimit {
                        end(.failure(.outputTooLarge(limit: outputLimit)))
                        return
                    }
                } else if !stderr.isComplete {
                    chunk.withUnsafeBytes { stderr.receive(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                }
            } else if count < 0 && errno == EINTR {
                continue
            } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                return
            } else {
                pipe.close()  // end of file (or an error: nothing more will come either way)
                return
            }
        }
    }

    // MARK: Ending

    /// The child exited: everything it wrote is in the pipes. Whatever of its group still holds
    /// them (a grandchild it left behind) is killed, as a timeout would: the command's answer is
    /// complete, and nothing may outlive it attached to the proxy.
    private func childExited() {
        guard !isFinished, let child else { return }
        if let stdoutPipe { read(stdoutPipe, reads: outputLimit / Self.readChunk + 2) }
        guard !isFinished else { return }
        if let stderrPipe { read(stderrPipe, reads: Self.stderrDrainLimit / Self.readChunk) }
        if stdoutPipe?.isOpen == true || stderrPipe?.isOpen == true { child.killGroup() }
        let status = child.reap()
        self.child = nil
        if let status, sp_wait_exited(status) != 0 {
            let code = Int32(sp_wait_exit_status(status))
            if code == 0 {
                end(.success(Output(stdout: stdout, stderrFirstLine: stderr.firstLine(scrubbing: stderrScrub))))
            } else {
                end(.failure(.exited(status: code, stderrFirstLine: stderr.firstLine(scrubbing: stderrScrub))))
            }
        } else if let status, sp_wait_signaled(status) != 0 {
            end(.failure(.signaled(Int32(sp_wait_signal(status)))))
        } else {
            // Reaped by someone else (a process-wide waitpid(-1)): its status is lost.
            end(.failure(.notStarted("its exit status was lost (reaped elsewhere)")))
        }
    }

    private func timedOut() {
        end(.failure(.timedOut(milliseconds: timeoutMilliseconds)))
    }

    private func end(_ outcome: Outcome) {
        guard !isFinished else { return }
        release()
        let finish = self.finish
        self.finish = nil
        finish?(outcome)
    }

    /// Idempotent: the timer and the pipes are closed, a child still running is killed with its
    /// group and reaped on the loop once gone.
    private func release() {
        isFinished = true
        if let timer {
            event_free(timer)
            self.timer = nil
        }
        stdoutPipe?.close()
        stderrPipe?.close()
        stdoutPipe = nil
        stderrPipe = nil
        child?.abandon()
        child = nil
    }
}

/// The read end of one of the child's output pipes, with its persistent read event.
private final class PipeEnd {
    private(set) var fd: Int32
    private var event: OpaquePointer?

    init(fd: Int32, base: OpaquePointer, owner: CommandRunner) {
        self.fd = fd
        self.owner = owner
        let context = Unmanaged.passUnretained(self).toOpaque()
        event = event_new(base, fd, sp_ev_read() | sp_ev_persist(), PipeEnd.callback, context)
        if let event {
            event_add(event, nil)
        }
    }

    /// The runner owns its pipes; the pipe only calls back.
    private unowned let owner: CommandRunner

    var isOpen: Bool { fd >= 0 }

    func close() {
        if let event {
            event_free(event)
            self.event = nil
        }
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }

    deinit { close() }

    private static let callback: event_callback_fn = { _, _, context in
        let pipe = Unmanaged<PipeEnd>.fromOpaque(context!).takeUnretainedValue()
        withExtendedLifetime(pipe) {
            let owner = pipe.owner
            withExtendedLifetime(owner) { owner.readable(pipe) }
        }
    }
}

/// A spawned child until it is reaped. It tells when the child exited without reaping it (a
/// pidfd, or a waitid(WNOWAIT) poll), so its pid stays its own until the owner reaps: killing its
/// group before that cannot reach a stranger that reused the id.
private final class ChildProcess {
    let pid: pid_t
    private var pidfd: Int32 = -1
    private var event: OpaquePointer?
    private var onExit: (() -> Void)?
    private var isReaped = false
    /// Set while an abandoned child waits to be reaped: it keeps itself alive until then.
    private var keepAlive: ChildProcess?

    /// How often the fallback looks (only where pidfd_open is refused: kernels before 5.3, seccomp).
    private static let pollMilliseconds = 20

    init(pid: pid_t, base: OpaquePointer, poll: Bool) {
        self.pid = pid
        let context = Unmanaged.passUnretained(self).toOpaque()
        if !poll { pidfd = sp_pidfd_open(pid) }
        if pidfd >= 0 {
            event = event_new(base, pidfd, sp_ev_read(), ChildProcess.callback, context)
            if let event { event_add(event, nil) }
        } else {
            event = event_new(base, -1, sp_ev_persist(), ChildProcess.callback, context)
            if let event { sp_event_add_ms(event, Self.pollMilliseconds) }
        }
    }

    deinit {
        if let event { event_free(event) }
        if pidfd >= 0 { close(pidfd) }
        // Only reached without an event base to wait on (the event could not be made): reap here.
        if !isReaped {
            killGroup()
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
    }

    func watch(onExit: @escaping () -> Void) {
        self.onExit = onExit
    }

    /// SIGKILL to the child's group (what it started, unless that left the group) and to the child
    /// itself (in case it left its group). Before reaping only: the ids are still the child's.
    func killGroup() {
        guard !isReaped else { return }
        kill(-pid, SIGKILL)
        kill(pid, SIGKILL)
    }

    /// The wait status, once the child exited; nil when it was reaped elsewhere.
    func reap() -> Int32? {
        guard !isReaped else { return nil }
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, 0) } while result < 0 && errno == EINTR
        isReaped = true
        stopWatching()
        return result == pid ? status : nil
    }

    /// The owner is done with a child that may still run: kill its group, and reap it when it is
    /// gone, on the loop (a SIGKILLed process may take a moment, and the loop must not wait).
    func abandon() {
        guard !isReaped else { return }
        onExit = nil
        killGroup()
        if event == nil {
            _ = reap()
            return
        }
        keepAlive = self
    }

    private func stopWatching() {
        if let event {
            event_free(event)
            self.event = nil
        }
        if pidfd >= 0 {
            close(pidfd)
            pidfd = -1
        }
    }

    private func exitObserved() {
        if pidfd < 0 && sp_child_has_exited(pid) == 0 { return }  // polling: still running
        stopWatching()
        if let onExit {
            self.onExit = nil
            onExit()
        } else {
            _ = reap()
        }
        keepAlive = nil
    }

    private static let callback: event_callback_fn = { _, _, context in
        let child = Unmanaged<ChildProcess>.fromOpaque(context!).takeUnretainedValue()
        withExtendedLifetime(child) { child.exitObserved() }
    }
}

/// The child as posix_spawn started it: its pid and the read ends of its stdout and stderr.
private struct SpawnedChild {
    let pid: pid_t
    let stdoutFD: Int32
    let stderrFD: Int32
}

private enum Spawn {
    /// execvp's default when the environment has no PATH (confstr(_CS_PATH)).
    static let defaultPath = "/bin:/usr/bin"

    static func start(argv: [String], environment: [String: String]) -> Result<SpawnedChild, CommandRunFailure> {
        guard let name = argv.first, !name.isEmpty else { return .failure(.notStarted("the command is empty")) }
        guard !argv.contains(where: { $0.utf8.contains(0) }) else {
            return .failure(.notStarted("an argument contains a NUL byte"))
        }
        guard !environment.contains(where: { $0.key.isEmpty || $0.key.utf8.contains(0x3D) || $0.key.utf8.contains(0) || $0.value.utf8.contains(0) })
        else { return .failure(.notStarted("an environment name or value cannot be passed")) }
        let program: String
        switch locate(name, path: environment["PATH"] ?? defaultPath) {
        case .success(let path): program = path
        case .failure(let failure): return .failure(failure)
        }

        var stdoutPipe: [Int32] = [-1, -1]
        var stderrPipe: [Int32] = [-1, -1]
        guard sp_pipe_cloexec(&stdoutPipe) == 0 else { return .failure(.notStarted(words(errno, "cannot make a pipe"))) }
        guard sp_pipe_cloexec(&stderrPipe) == 0 else {
            let error = errno
            close(stdoutPipe[0])
            close(stdoutPipe[1])
            return .failure(.notStarted(words(error, "cannot make a pipe")))
        }
        // Non-blocking for the proxy's reads only: the child's ends stay as a program expects them.
        _ = fcntl(stdoutPipe[0], F_SETFL, fcntl(stdoutPipe[0], F_GETFL) | O_NONBLOCK)
        _ = fcntl(stderrPipe[0], F_SETFL, fcntl(stderrPipe[0], F_GETFL) | O_NONBLOCK)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2)
        sp_spawn_add_closefrom(&actions, 3)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group (pgid = its pid): a timeout kills the group. The signal mask of
        // the spawning thread is not the program's business, nor are the dispositions the proxy
        // ignores (SIGPIPE): the program starts with defaults, as from a shell.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        posix_spawnattr_setpgroup(&attributes, 0)
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var everySignal = sigset_t()
        sigfillset(&everySignal)
        posix_spawnattr_setsigdefault(&attributes, &everySignal)

        let arguments = CStrings(argv)
        let variables = CStrings(environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })
        var pid: pid_t = 0
        let result = arguments.withPointers { argvPointer in
            variables.withPointers { envPointer in
                posix_spawn(&pid, program, &actions, &attributes, argvPointer, envPointer)
            }
        }
        close(stdoutPipe[1])
        close(stderrPipe[1])
        guard result == 0 else {
            close(stdoutPipe[0])
            close(stderrPipe[0])
            return .failure(.notStarted(words(result, "cannot run '\(name)'")))
        }
        return .success(SpawnedChild(pid: pid, stdoutFD: stdoutPipe[0], stderrFD: stderrPipe[0]))
    }

    /// execvp's search (POSIX exec §DESCRIPTION) over the given PATH, not the proxy's: a name with
    /// a `/` is used as it is; otherwise the first regular executable file in the PATH's
    /// directories. Unlike execvp, relative entries (and the empty one, which means the working
    /// directory) are skipped: which program runs must not depend on where the proxy was started.
    static func locate(_ name: String, path: String) -> Result<String, CommandRunFailure> {
        if name.contains("/") { return .success(name) }
        var foundNotExecutable = false
        for directory in path.split(separator: ":", omittingEmptySubsequences: true) where directory.hasPrefix("/") {
            let candidate = directory.hasSuffix("/") ? "\(directory)\(name)" : "\(directory)/\(name)"
            var info = stat()
            guard stat(candidate, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
            if access(candidate, X_OK) == 0 { return .success(candidate) }
            foundNotExecutable = true
        }
        if foundNotExecutable { return .failure(.notStarted("'\(name)' is in PATH but not executable")) }
        return .failure(.notStarted("no such program '\(name)' in PATH"))
    }

    static func words(_ error: Int32, _ context: String) -> String {
        "\(context): \(String(cString: strerror(error)))"
    }
}

/// NUL-terminated copies of strings and the NULL-terminated array execve wants, freed on deinit.
private final class CStrings {
    private var pointers: [UnsafeMutablePointer<CChar>?]

    init(_ strings: [String]) {
        pointers = strings.map { strdup($0) } + [nil]
    }

    func withPointers<R>(_ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    deinit {
        for pointer in pointers { free(pointer) }
    }
}

/// The proxy's own environment, for `CommandEnvironment.minimal` (read once at start or reload:
/// `environ` is not safe to read while another thread calls setenv).
public enum ProcessEnvironment {
    public static func current() -> [String: String] {
        var variables: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "="), equals != text.startIndex {
                let name = String(text[..<equals])
                if variables[name] == nil { variables[name] = String(text[text.index(after: equals)...]) }
            }
            cursor += 1
        }
        return variables
    }
}
