import Foundation
import PosixSupport
import ProxyCore
import TestSupport
import Testing

@testable import ProxyEngine

/// A `command:` program runs as the proxy's user: once the proxy forbids inspection, it cannot
/// read the proxy's environment (which holds `env:` secrets) through /proc (attack/proc_environ_leak.sh).
@Suite("process inspection")
struct ProcessInspectionTests {
    /// Runs `argv` with a `CommandRunner` on a loop of its own and returns its stdout.
    private func run(_ argv: [String]) throws -> String {
        let loop = try MailboxLoop(name: "test-inspection", configuration: EngineConfiguration())
        defer { loop.stop() }
        let result = Locked<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        let worker = loop.worker
        let holder = Locked<CommandRunner?>(nil)
        loop.mailbox.post {
            let runner = CommandRunner(worker: worker, argv: argv, environment: ["PATH": "/usr/bin:/bin"], timeoutMilliseconds: 20_000)
            holder.withLock { $0 = runner }
            runner.start { outcome in
                result.withLock { $0 = (try? outcome.get()).map { String(decoding: $0.stdout, as: UTF8.self) } ?? "" }
                holder.withLock { $0 = nil }
                done.signal()
            }
        }
        guard done.wait(timeout: .now() + 60) == .success else { throw InspectionRunTimedOut() }
        return result.withLock { $0 } ?? ""
    }

    @Test("a command cannot read the proxy's /proc/PID/environ once inspection is forbidden")
    func commandCannotReadParentEnvironment() throws {
        #expect(ProcessInspection.forbid())
        #expect(ProcessInspection.isForbidden)
        // The command's parent is this process; its environment has PATH at least.
        let seen = try run(["/bin/sh", "-c", "cat /proc/$PPID/environ 2>/dev/null | tr '\\000' '\\n' | wc -l; echo done"])
        let lines = seen.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(lines.last == "done")
        // Root (CAP_SYS_PTRACE) reads any /proc entry whatever the process says: the check that
        // matters runs as a user (attack/proc_environ_leak.sh runs the binary as nobody).
        if geteuid() != 0 { #expect(lines == ["0", "done"]) }
        // The process itself still reads its own entries (self is always allowed).
        #expect(!ProcessEnvironment.current().isEmpty)
    }
}

private struct InspectionRunTimedOut: Error {}
