import Foundation
import PosixSupport
import ProxyCore
import Redaction
import TestSupport
import Testing

@testable import ProxyEngine

/// A failing command's stderr line goes to the error log cut to 200 bytes: every secret value is
/// replaced before the cut, so a value straddling it leaves none of its bytes (attack/stderr_cut_leak.sh).
@Suite("command stderr scrub")
struct CommandStderrScrubTests {
    private func failure(_ argv: [String], scrub: @escaping @Sendable ([UInt8]) -> [UInt8]) throws -> CommandRunFailure? {
        let loop = try MailboxLoop(name: "test-stderr-scrub", configuration: EngineConfiguration())
        defer { loop.stop() }
        let result = Locked<CommandRunFailure?>(nil)
        let done = DispatchSemaphore(value: 0)
        let worker = loop.worker
        let holder = Locked<CommandRunner?>(nil)
        loop.mailbox.post {
            let runner = CommandRunner(
                worker: worker, argv: argv, environment: ["PATH": "/usr/bin:/bin"], timeoutMilliseconds: 20_000, stderrScrub: scrub)
            holder.withLock { $0 = runner }
            runner.start { outcome in
                if case .failure(let failure) = outcome { result.withLock { $0 = failure } }
                holder.withLock { $0 = nil }
                done.signal()
            }
        }
        guard done.wait(timeout: .now() + 60) == .success else { throw StderrRunTimedOut() }
        return result.withLock { $0 }
    }

    @Test("a secret straddling byte 200 of stderr's line is replaced whole, none of its bytes logged", arguments: [150, 190, 199])
    func straddlingValue(padding: Int) throws {
        let canary = "CANARYstderr0123456789abcdefghijklmnop"
        let tripwire = Tripwire(secrets: [Array(canary.utf8)])
        let script = "printf '%s%s tail\\n' \"$(head -c \(padding) /dev/zero | tr '\\0' x)\" '\(canary)' >&2; exit 1"
        let failure = try #require(try failure(["sh", "-c", script], scrub: { tripwire.scrub($0).line }))
        guard case .exited(1, let line?) = failure else {
            Issue.record("not an exit with a stderr line: \(failure)")
            return
        }
        #expect(line.utf8.count <= CommandStandardError.maximumBytes)
        #expect(!line.contains("CANARY"))
        // The marker stands where the value began (itself cut at 200 bytes when it starts late).
        #expect(line == String((String(repeating: "x", count: padding) + "<tripwire> tail").utf8.prefix(200))!)
    }

    @Test("a secret with a non-ASCII byte is replaced before bytes become '?'")
    func nonASCIIValue() throws {
        let canary = "CANARY-p\u{E4}ss-0123456789"
        let tripwire = Tripwire(secrets: [Array(canary.utf8)])
        let failure = try #require(try failure(["sh", "-c", "printf 'bad %s\\n' '\(canary)' >&2; exit 1"], scrub: { tripwire.scrub($0).line }))
        #expect(failure == .exited(status: 1, stderrFirstLine: "bad <tripwire>"))
    }
}

private struct StderrRunTimedOut: Error {}
