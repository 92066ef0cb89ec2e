import CLibevent
import Foundation
import PosixSupport
import ProxyCore
import TestSupport
import Testing

@testable import ProxyEngine

/// One runner's outcome as the test thread sees it.
private struct Run {
    let outcome: CommandRunner.Outcome
    /// The child's pid, which is also its process group's id.
    let pid: pid_t?

    var stdout: String? { (try? outcome.get()).map { String(decoding: $0.stdout, as: UTF8.self) } }
    var failure: CommandRunFailure? { if case .failure(let failure) = outcome { failure } else { nil } }
}

/// The runners alive on the loop (touched on the loop's thread only).
private final class LoopOwned<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// A worker stand-in (a mailbox loop) for runners, and what the runs ended with.
private final class RunnerRig {
    let loop: MailboxLoop
    static let environment = ["PATH": "/usr/bin:/bin"]

    init() throws {
        loop = try MailboxLoop(name: "test-commands", configuration: EngineConfiguration())
    }

    deinit { loop.stop() }

    /// Starts every command on the loop (in one job) and waits for all of them to finish: a
    /// generous bound that only keeps a broken runner from hanging the suite.
    func run(
        _ commands: [[String]], environment: [String: String] = RunnerRig.environment, timeoutMilliseconds: Int = 20_000,
        outputLimit: Int = CommandRunner.defaultOutputLimit, pollForExit: Bool = false
    ) throws -> [Run] {
        let results = Locked<[Int: Run]>([:])
        let done = DispatchSemaphore(value: 0)
        let worker = loop.worker
        let runners = LoopOwned<[Int: CommandRunner]>([:])
        loop.mailbox.post {
            for (index, argv) in commands.enumerated() {
                let runner = CommandRunner(
                    worker: worker, argv: argv, environment: environment, timeoutMilliseconds: timeoutMilliseconds, outputLimit: outputLimit,
                    pollForExit: pollForExit)
                runners.value[index] = runner
                let pid = LoopOwned<pid_t?>(nil)
                runner.start { outcome in
                    results.withLock { $0[index] = Run(outcome: outcome, pid: pid.value) }
                    runners.value[index] = nil
                    done.signal()
                }
                pid.value = runner.processID
            }
        }
        for _ in commands {
            guard done.wait(timeout: .now() + 60) == .success else { throw RunnerTimedOut() }
        }
        return results.withLock { results in commands.indices.compactMap { results[$0] } }
    }

    func run(
        _ argv: [String], environment: [String: String] = RunnerRig.environment, timeoutMilliseconds: Int = 20_000,
        outputLimit: Int = CommandRunner.defaultOutputLimit, pollForExit: Bool = false
    ) throws -> Run {
        try #require(
            try run(
                [argv], environment: environment, timeoutMilliseconds: timeoutMilliseconds, outputLimit: outputLimit, pollForExit: pollForExit
            ).first)
    }
}

private struct RunnerTimedOut: Error {}

/// What /proc says about processes: the check that nothing a command started survives it.
private enum Processes {
    /// Processes of the group that are not zombies (a zombie is dead; its reaping is its parent's).
    static func living(inGroup group: pid_t) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { name in
            guard let pid = pid_t(name), let stat = stat(of: pid), stat.group == group, stat.state != "Z" else { return nil }
            return pid
        }
    }

    /// State, parent and process group from /proc/PID/stat (fields after the parenthesized name).
    static func stat(of pid: pid_t) -> (state: String, parent: pid_t, group: pid_t)? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 3, let parent = pid_t(fields[1]), let group = pid_t(fields[2]) else { return nil }
        return (String(fields[0]), parent, group)
    }

    /// The test process's zombie children in `groups` (our runners' children, if any was leaked).
    static func zombieChildren(inGroups groups: Set<pid_t>) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { name in
            guard let pid = pid_t(name), let stat = stat(of: pid), stat.parent == getpid(), stat.state == "Z", groups.contains(stat.group)
            else { return nil }
            return pid
        }
    }

    /// The pid is no child of this process any more: reaped (waitid with WNOWAIT, which reaps nothing).
    static func isReaped(_ pid: pid_t) -> Bool {
        sp_child_has_exited(pid) == -1 && errno == ECHILD
    }

    /// Polls (every 10 ms, up to 20 s) until the condition holds: the runner kills and reaps
    /// asynchronously, on its loop, after it answered. Not a timing assertion: only a bound.
    static func eventually(_ condition: () -> Bool) -> Bool {
        for _ in 0..<2000 {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }

    /// Nothing of the group is alive and its leader is reaped.
    static func allGone(_ pid: pid_t) -> Bool {
        eventually { living(inGroup: pid).isEmpty && isReaped(pid) }
    }
}

@Suite("CommandRunner: command secrets' programs on a worker's loop", .serialized)
struct CommandRunnerTests {
    @Test(
        "exit 0: stdout is the output, stderr's first line comes along; the program is found in the given PATH",
        arguments: [false, true])
    func success(pollForExit: Bool) throws {
        let rig = try RunnerRig()
        let run = try rig.run(["sh", "-c", "printf 'tok-123\\n'; printf 'note: cached\\nmore\\n' >&2"], pollForExit: pollForExit)
        let output = try run.outcome.get()
        #expect(output.stdout == Array("tok-123\n".utf8))
        #expect(output.stderrFirstLine == "note: cached")
        let pid = try #require(run.pid)
        #expect(Processes.allGone(pid))
    }

    @Test("a status other than 0 is .exited with stderr's first line, made printable and bounded")
    func exitStatus() throws {
        let rig = try RunnerRig()
        let run = try rig.run(["sh", "-c", "echo ignored; printf 'error: not\\033[31m logged in\\r\\nsecond\\n' >&2; exit 3"])
        #expect(run.failure == .exited(status: 3, stderrFirstLine: "error: not?[31m logged in"))
        let long = try rig.run(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x >&2; exit 1"])
        #expect(long.failure == .exited(status: 1, stderrFirstLine: String(repeating: "x", count: 200)))
        let silent = try rig.run(["sh", "-c", "exit 42"])
        #expect(silent.failure == .exited(status: 42, stderrFirstLine: nil))
    }

    @Test("a signal it did not get from the runner is .signaled")
    func signaled() throws {
        let rig = try RunnerRig()
        let run = try rig.run(["sh", "-c", "kill -TERM $$"])
        #expect(run.failure == .signaled(SIGTERM))
    }

    @Test("a command still running at the timeout is killed with its group and reaped", arguments: [false, true])
    func timeout(pollForExit: Bool) throws {
        let rig = try RunnerRig()
        // The shell forks `sleep` (it is not the last command): the group has two processes.
        let run = try rig.run(["sh", "-c", "sleep 30; echo late"], timeoutMilliseconds: 300, pollForExit: pollForExit)
        #expect(run.failure == .timedOut(milliseconds: 300))
        let pid = try #require(run.pid)
        #expect(Processes.allGone(pid))
        #expect(Processes.zombieChildren(inGroups: [pid]).isEmpty)
    }

    @Test("a command that closes stdout and stderr early but runs on ends at the timeout, nothing left")
    func closesOutputEarly() throws {
        let rig = try RunnerRig()
        let run = try rig.run(["sh", "-c", "echo partial; exec >&- 2>&-; sleep 30"], timeoutMilliseconds: 300)
        #expect(run.failure == .timedOut(milliseconds: 300))
        let pid = try #require(run.pid)
        #expect(Processes.allGone(pid))
    }

    @Test("a grandchild that keeps stdout open does not hold the answer: the command's exit does, and the grandchild is killed")
    func grandchildHoldsStdout() throws {
        let rig = try RunnerRig()
        // The timeout is far away: an answer that waited for the pipe's end would be .timedOut.
        let run = try rig.run(["sh", "-c", "(sleep 30; echo late) & echo tok"], timeoutMilliseconds: 20_000)
        #expect(run.stdout == "tok\n")
        let pid = try #require(run.pid)
        #expect(Processes.allGone(pid))
    }

    @Test("stdout past the limit kills the group: .outputTooLarge", arguments: [false, true])
    func outputLimit(pollForExit: Bool) throws {
        let rig = try RunnerRig()
        let run = try rig.run(["sh", "-c", "head -c 200000 /dev/zero; sleep 30"], outputLimit: 1000, pollForExit: pollForExit)
        #expect(run.failure == .outputTooLarge(limit: 1000))
        let pid = try #require(run.pid)
        #expect(Processes.allGone(pid))
        // Exactly the limit is fine.
        let exact = try rig.run(["sh", "-c", "head -c 1000 /dev/zero"], outputLimit: 1000)
        #expect(try exact.outcome.get().stdout.count == 1000)
        // An endless writer, ended by the limit, never by the timeout.
        let endless = try rig.run(["yes", "CANARY"], outputLimit: 64 * 1024)
        #expect(endless.failure == .outputTooLarge(limit: 64 * 1024))
    }

    @Test("the child's environment is exactly the minimal one: no secret of the proxy's environment")
    func minimalEnvironment() throws {
        let rig = try RunnerRig()
        let canary = "CANARY-env-\(UInt32.random(in: 0...UInt32.max))"
        let proxyEnvironment = [
            "PATH": "/usr/bin:/bin", "HOME": "/home/proxy", "USER": "proxy", "LANG": "C.UTF-8", "XDG_CONFIG_HOME": "/home/proxy/.config",
            "GH_HOST": "github.example", "GITHUB_TOKEN": canary, "AWS_SECRET_ACCESS_KEY": canary,
        ]
        let environment = CommandEnvironment.minimal(from: proxyEnvironment, passing: ["GH_HOST"])
        let run = try rig.run(["env"], environment: environment)
        let lines = Set(try #require(run.stdout).split(separator: "\n").map(String.init))
        #expect(
            lines == [
                "PATH=/usr/bin:/bin", "HOME=/home/proxy", "USER=proxy", "LANG=C.UTF-8", "XDG_CONFIG_HOME=/home/proxy/.config",
                "GH_HOST=github.example",
            ])
        #expect(!(run.stdout ?? "").contains("CANARY"))
        // The proxy's own environment is a source, never passed whole.
        #expect(ProcessEnvironment.current()["PATH"] != nil)
    }

    @Test("the child starts with no signal blocked or ignored, although the proxy ignores SIGPIPE")
    func defaultSignals() throws {
        let rig = try RunnerRig()
        signal(SIGPIPE, SIG_IGN)  // as the proxy (and the mailbox loop) already did: the child must not inherit it
        let run = try rig.run(["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"])
        let masks = Dictionary(
            uniqueKeysWithValues: try #require(run.stdout).split(separator: "\n").compactMap { line -> (String, UInt64)? in
                let parts = line.split(separator: "\t")
                guard parts.count == 2, let mask = UInt64(parts[1], radix: 16) else { return nil }
                return (String(parts[0]), mask)
            })
        #expect(masks["SigBlk:"] == 0)
        // Signals 1...31 (bits 0...30) at their defaults. glibc's posix_spawn leaves its two internal
        // real-time signals (32, 33) ignored in every child it starts: not the proxy's doing.
        #expect(masks["SigIgn:"].map { $0 & 0x7FFF_FFFF } == 0)
    }

    @Test("no descriptor of the proxy reaches the child: /proc/self/fd of the child holds 0, 1 and 2 only")
    func noDescriptorLeaks() throws {
        let rig = try RunnerRig()
        // Descriptors opened the careless way (no O_CLOEXEC), as a library might: still not inherited.
        let file = open("/dev/null", O_RDONLY)
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer {
            close(file)
            close(socket)
        }
        #expect(file >= 3 && socket >= 3)
        let run = try rig.run(["ls", "-l", "/proc/self/fd"])
        let listing = try #require(run.stdout)
        var descriptors: [Int: String] = [:]
        for line in listing.split(separator: "\n") {
            guard let arrow = line.range(of: " -> ") else { continue }
            let number = line[..<arrow.lowerBound].split(separator: " ").last.flatMap { Int($0) }
            if let number { descriptors[number] = String(line[arrow.upperBound...]) }
        }
        // ls's own directory descriptor is the one extra entry: it points at the listing itself.
        let others = descriptors.filter { number, target in number > 2 && !(target.hasPrefix("/proc/") && target.hasSuffix("/fd")) }
        #expect(others.isEmpty, "inherited: \(others)")
        #expect(descriptors[0] == "/dev/null")
        #expect(descriptors[1]?.hasPrefix("pipe:") == true)
        #expect(descriptors[2]?.hasPrefix("pipe:") == true)
    }

    @Test("a program that is not there: .notStarted with words that name it, nothing else")
    func notFound() throws {
        let rig = try RunnerRig()
        let missing = try rig.run(["scopeproxy-no-such-program", "--secret-argument"])
        #expect(missing.failure == .notStarted("no such program 'scopeproxy-no-such-program' in PATH"))
        #expect(missing.pid == nil)
        // The environment's PATH is searched, not the proxy's: `sh` is not in /nonexistent.
        let wrongPath = try rig.run(["sh", "-c", "true"], environment: ["PATH": "/nonexistent:relative/bin"])
        #expect(wrongPath.failure == .notStarted("no such program 'sh' in PATH"))
        let absent = try rig.run(["/nonexistent/program"])
        #expect(absent.failure == .notStarted("cannot run '/nonexistent/program': No such file or directory"))
        let empty = try rig.run([] as [String])
        #expect(empty.failure == .notStarted("the command is empty"))
        let description = try #require(missing.failure).description(program: "scopeproxy-no-such-program")
        #expect(!description.contains("--secret-argument"))
    }

    @Test("a program found in the given PATH only, and one there that is not executable")
    func pathLookup() throws {
        let rig = try RunnerRig()
        let directory = try ScratchDirectory()
        let script = directory.path + "/scopeproxy-test-helper"
        try "#!/bin/sh\necho helper-ran\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let plain = directory.path + "/scopeproxy-test-plain"
        try "#!/bin/sh\necho never\n".write(toFile: plain, atomically: true, encoding: .utf8)
        chmod(plain, 0o644)
        let path = "/nonexistent:\(directory.path):/usr/bin:/bin"
        let found = try rig.run(["scopeproxy-test-helper"], environment: ["PATH": path])
        #expect(found.stdout == "helper-ran\n")
        let notExecutable = try rig.run(["scopeproxy-test-plain"], environment: ["PATH": path])
        #expect(notExecutable.failure == .notStarted("'scopeproxy-test-plain' is in PATH but not executable"))
    }

    @Test("30 concurrent runs on one loop all answer, each with its own output")
    func concurrentRuns() throws {
        let rig = try RunnerRig()
        let commands = (0..<30).map { ["sh", "-c", "echo tok-$0; echo err-$0 >&2", "\($0)"] }
        let runs = try rig.run(commands)
        #expect(runs.count == 30)
        for (index, run) in runs.enumerated() {
            #expect(run.stdout == "tok-\(index)\n")
            #expect((try? run.outcome.get())?.stderrFirstLine == "err-\(index)")
        }
        let groups = Set(runs.compactMap(\.pid))
        #expect(groups.count == 30)
        #expect(Processes.eventually { groups.allSatisfy { Processes.isReaped($0) } })
        #expect(Processes.zombieChildren(inGroups: groups).isEmpty)
    }

    @Test("cancel kills the group and reaps the child: no zombie, and finish is never called")
    func cancelLeavesNoZombie() throws {
        let rig = try RunnerRig()
        let worker = rig.loop.worker
        let finished = Locked(0)
        let pids = Locked<[pid_t]>([])
        let started = DispatchSemaphore(value: 0)
        let runners = LoopOwned<[CommandRunner]>([])
        rig.loop.mailbox.post {
            // One cancelled in the same turn of the loop, one after it ran a while, one dropped.
            for _ in 0..<3 {
                let runner = CommandRunner(
                    worker: worker, argv: ["sh", "-c", "sleep 30; echo late"], environment: RunnerRig.environment, timeoutMilliseconds: 20_000)
                runner.start { _ in finished.withLock { $0 += 1 } }
                if let pid = runner.processID { pids.withLock { $0.append(pid) } }
                runners.value.append(runner)
            }
            runners.value[0].cancel()
            started.signal()
        }
        #expect(started.wait(timeout: .now() + 60) == .success)
        let all = pids.withLock { $0 }
        #expect(all.count == 3)
        // Let the other two run (their shells have forked `sleep`) before cancelling and dropping them.
        #expect(Processes.eventually { all.dropFirst().allSatisfy { Processes.living(inGroup: $0).count == 2 } })
        let cancelled = DispatchSemaphore(value: 0)
        rig.loop.mailbox.post {
            runners.value[1].cancel()
            runners.value.removeAll()  // the third is released without a cancel: deinit does the same
            cancelled.signal()
        }
        #expect(cancelled.wait(timeout: .now() + 60) == .success)
        for pid in all { #expect(Processes.allGone(pid)) }
        #expect(Processes.zombieChildren(inGroups: Set(all)).isEmpty)
        #expect(finished.withLock { $0 } == 0)
    }
}
