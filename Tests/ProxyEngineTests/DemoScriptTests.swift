import Foundation
import TestSupport
import Testing

// `make demo` is the first thing the README asks for: config/demo/run.sh run here as make runs it,
// against the built binary, with every server on a free port (DEMO_PORTS=free) and its files in a
// scratch directory (DEMO_DIR), so it neither needs nor disturbs the fixed ports a user's demo holds.

private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

private struct ScriptRun {
    let status: Int32
    let stdout: String
    let stderr: String
}

/// Runs `config/demo/run.sh` to its end. Past 120 s (a hung demo) it is killed and the status is -1.
///
/// The demo starts with a signal mask of the test's choosing, set by python3 before it becomes
/// bash: an empty one, as from a terminal, or one blocking SIGTERM, as a caller's thread may (this
/// test runner's does), a mask every process the demo starts inherits.
private func runDemo(in scratch: ScratchDirectory, environment: [String: String] = [:], blockingSIGTERM: Bool = false) throws -> ScriptRun {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [
        "python3", "-c",
        """
        import os, signal, sys
        signal.pthread_sigmask(signal.SIG_SETMASK, [signal.SIGTERM] if sys.argv[2] == "block" else [])
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.execv("/bin/bash", ["bash", sys.argv[1]])
        """, repositoryRoot.appendingPathComponent("config/demo/run.sh").path, blockingSIGTERM ? "block" : "clear",
    ]
    var childEnvironment = ProcessInfo.processInfo.environment.merging(
        ["SCOPEPROXY_BINARY": ProxyProcess.binaryPath, "DEMO_DIR": scratch.path + "/demo", "DEMO_PORTS": "free"]) { $1 }
        .merging(environment) { $1 }
    // As on a user's machine: python3 writes __pycache__ next to what it imports unless told not to.
    childEnvironment["PYTHONDONTWRITEBYTECODE"] = nil
    process.environment = childEnvironment
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    try process.run()
    final class Box: @unchecked Sendable { var data = Data() }
    let outText = Box(), errorText = Box()
    let drained = DispatchGroup()
    for (handle, box) in [(output.fileHandleForReading, outText), (errors.fileHandleForReading, errorText)] {
        drained.enter()
        Thread.detachNewThread {
            box.data = handle.readDataToEndOfFile()
            drained.leave()
        }
    }
    var status = Int32(-1)
    if exited.wait(timeout: .now() + 120) == .timedOut {
        kill(process.processIdentifier, SIGKILL)
        _ = exited.wait(timeout: .now() + 10)
    } else {
        status = process.terminationStatus
    }
    _ = drained.wait(timeout: .now() + 10)
    return ScriptRun(
        status: status, stdout: String(decoding: outText.data, as: UTF8.self),
        stderr: String(decoding: errorText.data, as: UTF8.self))
}

/// Every file and directory under config/demo: what a run must leave as it found it.
private func demoTree() -> [String] {
    let root = repositoryRoot.appendingPathComponent("config/demo").path
    return (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).sorted()
}

/// A `python3` first in PATH that waits `seconds` before it runs the real one: origins that are slow
/// to come up, as on a loaded machine.
private func slowPython(in scratch: ScratchDirectory, seconds: Int) throws -> String {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    let real = path.split(separator: ":").map { "\($0)/python3" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    let python = try #require(real, "no python3 in PATH")
    try FileManager.default.createDirectory(atPath: scratch.path + "/bin", withIntermediateDirectories: true)
    scratch.write("bin/python3", "#!/bin/sh\nsleep \(seconds)\nexec '\(python)' \"$@\"\n", mode: 0o755)
    return scratch.path + "/bin:" + path
}

/// config/demo/demo.yaml with the cdn scope's token taken out: the demo's first step claims the cdn
/// receives it.
private func configWithoutCDNToken(in scratch: ScratchDirectory) throws -> String {
    let demo = try String(contentsOf: repositoryRoot.appendingPathComponent("config/demo/demo.yaml"), encoding: .utf8)
    let edited = demo.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.contains("X-CDN-Token") }.joined(separator: "\n")
    #expect(edited != demo)
    return scratch.write("edited.yaml", edited)
}

/// The processes whose command line names `scratch` (every server the demo starts names a file in
/// it), killed: after the demo they are the ones that outlived it.
private func survivors(of scratch: ScratchDirectory) -> [String] {
    let own = getpid()
    let found =
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { entry -> (Int32, String)? in
            guard let pid = Int32(entry), pid != own,
                let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline")
            else { return nil }
            let commandLine = String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
            return commandLine.contains(scratch.path) ? (pid, commandLine) : nil
        } ?? []
    for (pid, _) in found { kill(pid, SIGKILL) }
    return found.map(\.1)
}

@Suite("make demo: waits for its servers, checks every step, writes nothing into the checkout", .serialized)
struct DemoScriptTests {
    @Test("the demo waits for origins slow to start, every step shows what it claims, and its commands name files that exist")
    func passesWithSlowOrigins() throws {
        let scratch = ScratchDirectory()
        let before = demoTree()
        // The proxy is up long before these origins: a demo that waited for the proxy alone would
        // send its first request to an origin not yet listening (502 upstream_refused).
        let run = try runDemo(in: scratch, environment: ["PATH": try slowPython(in: scratch, seconds: 2)])
        #expect(run.status == 0, "stderr: \(run.stderr)")
        #expect(run.stdout.contains("demo: every step showed what it claims."))
        #expect(!run.stdout.contains("upstream_refused"))
        #expect(
            run.stdout.contains(
                #"what the cdn origin received (its own log): {"origin": "cdn", "path": "/files/report.pdf", "received": {"x-cdn-token": "demo-cdn-token-456"}}"#
            ))
        #expect(run.stdout.contains("GITHUB_TOKEN=scopeproxy-ph-gh_token-"))
        #expect(run.stdout.contains(#""client_authenticated": true, "tokens_issued": 1}"#))
        // The commands it prints to copy name the config and the CA it wrote, and both exist.
        let named = run.stdout.split(separator: "\n").flatMap { line -> [String] in
            let words = line.split(separator: " ").map(String.init)
            return zip(words, words.dropFirst()).filter { ["--config", "--cacert"].contains($0.0) }.map {
                $0.1.replacingOccurrences(of: ")\"", with: "")
            }
        }
        #expect(Set(named) == [scratch.path + "/demo/demo.yaml", scratch.path + "/demo/scopeproxy-ca.pem"])
        for path in named { #expect(FileManager.default.fileExists(atPath: path), "\(path) named but missing") }
        #expect(demoTree() == before)
    }

    @Test("a step that does not show what it claims ends the demo with exit 1, the step named, and its servers stopped")
    func failingStepIsNamed() throws {
        let scratch = ScratchDirectory()
        let run = try runDemo(in: scratch, environment: ["DEMO_CONFIG": try configWithoutCDNToken(in: scratch)])
        #expect(run.status == 1)
        #expect(
            run.stderr.contains(
                #"demo: step "redirect through scopeproxy" failed: expected the cdn to receive its own token ("x-cdn-token": "demo-cdn-token-456"); got: {"origin": "cdn", "path": "/files/report.pdf", "received": {}}"#
            ))
        #expect(!run.stdout.contains("every step showed"))
        #expect(survivors(of: scratch) == [])
    }

    @Test("started with SIGTERM blocked (the mask every server inherits), the demo still stops every server it started")
    func stopsServersStartedWithSIGTERMBlocked() throws {
        let scratch = ScratchDirectory()
        let run = try runDemo(in: scratch, environment: ["DEMO_CONFIG": try configWithoutCDNToken(in: scratch)], blockingSIGTERM: true)
        #expect(run.status == 1)
        #expect(run.stderr.contains(#"demo: step "redirect through scopeproxy" failed"#))
        #expect(survivors(of: scratch) == [])
    }

    @Test("a server that never comes up ends the demo with exit 1, naming the server and the end of its log")
    func serverThatNeverComesUpIsNamed() throws {
        let scratch = ScratchDirectory()
        let run = try runDemo(in: scratch, environment: ["DEMO_CONFIG": scratch.write("broken.yaml", "scopes:\n  - name: [oops\n")])
        #expect(run.status == 1)
        #expect(
            run.stderr.contains("demo: scopeproxy exited (status 2) before it was ready; the end of its log (\(scratch.path)/demo/run/proxy.log):"))
        #expect(run.stderr.contains("broken.yaml:3:1: YAML syntax error"))
        #expect(!run.stdout.contains("== "))
        #expect(survivors(of: scratch) == [])
    }

    @Test("config/demo/demo.yaml used in place, as the demo's commands name it: works, and writes only under the home directory")
    func configInPlaceWritesOutsideTheCheckout() throws {
        let home = ScratchDirectory()
        let before = demoTree()
        let config = "config/demo/demo.yaml"
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent(config), encoding: .utf8)
        // A loopback http:// origin needs no require_https setting (docs/configuration.md).
        #expect(!text.contains("require_https"))
        for command in [["env", "--config", config], ["ca", "--config", config]] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ProxyProcess.binaryPath)
            process.arguments = command
            process.currentDirectoryURL = repositoryRoot
            process.environment = ProcessInfo.processInfo.environment.merging(["HOME": home.path]) { $1 }
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(command)")
            #expect(printed.hasPrefix(command[0] == "env" ? "export GITHUB_TOKEN=scopeproxy-ph-gh_token-" : "-----BEGIN CERTIFICATE-----"))
        }
        #expect(FileManager.default.fileExists(atPath: home.path + "/.cache/scopeproxy-demo/ca/placeholder.key"))
        let after = demoTree()
        #expect(after == before, "written into the checkout: \(Set(after).subtracting(before).sorted())")
        // Leave the checkout as it was even when this test fails.
        for added in Set(after).subtracting(before) {
            try? FileManager.default.removeItem(atPath: repositoryRoot.appendingPathComponent("config/demo/" + added).path)
        }
    }
}

@Suite("the demo's servers: a log line per request, whole")
struct DemoServerLogTests {
    /// The demo origin answers on threads; run.sh reads its log's lines as what it received. Requests
    /// that arrive together must still leave one whole JSON line each (a torn line made the demo's
    /// OAuth2 step read an empty last line now and then).
    @Test("concurrent requests to a demo origin leave one whole JSON line each in its log")
    func concurrentRequestsLeaveWholeLines() throws {
        let rounds = 5, concurrent = 20
        let output = try runPython(
            repositoryRoot.appendingPathComponent("Tests/Fixtures/demo_origin_log_lines.py").path,
            [repositoryRoot.appendingPathComponent("config/demo").path, "\(rounds)", "\(concurrent)"])
        struct Counts: Decodable { let lines: Int; let whole: Int; let answered: Int; let last: String }
        let counts = try JSONDecoder().decode(Counts.self, from: Data(output.utf8))
        #expect(counts.answered == rounds * concurrent)
        #expect(counts.lines == rounds * concurrent)
        #expect(counts.whole == rounds * concurrent)
        #expect(counts.last == "", "the log ends with a newline")
    }
}

/// Runs `python3 SCRIPT ARGUMENTS`; its stdout, or a failure with its stderr.
private func runPython(_ script: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-B", script] + arguments
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let outData = output.fileHandleForReading.readDataToEndOfFile()
    let errorData = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    try #require(process.terminationStatus == 0, "\(String(decoding: errorData, as: UTF8.self))")
    return String(decoding: outData, as: UTF8.self)
}
