import Foundation

/// The built `scopeproxy` binary run as a child process (black-box tests): started on port 0,
/// its address read from the `listening on HOST:PORT` line it prints on stderr.
public final class ProxyProcess: @unchecked Sendable {
    public let process: Process
    public let port: UInt16
    private let stderrPipe: Pipe
    private let stderrLock = NSLock()
    private var stderrText = ""
    private let stderrClosed = DispatchSemaphore(value: 0)

    public static var binaryPath: String {
        if let path = ProcessInfo.processInfo.environment["SCOPEPROXY_BINARY"] { return path }
        // Tests/TestSupport/ProxyProcess.swift -> package root
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/scopeproxy").path
    }

    /// `fileLimit`: start the proxy under `ulimit -n` (descriptor exhaustion tests).
    /// `launcher`: a command that execs the proxy (its path and arguments follow the launcher's
    /// own), e.g. `unshare -m` with a private /etc/hosts (EgressEngineTests).
    public init(arguments: [String] = [], environment: [String: String] = [:], fileLimit: Int? = nil, launcher: [String] = []) throws {
        process = Process()
        // `run`, listening on a free port unless the caller names an address (an option given
        // twice is refused by the command line).
        var command = arguments.first == "run" ? Array(arguments.dropFirst()) : arguments
        if !command.contains("--listen") { command = ["--listen", "127.0.0.1:0"] + command }
        command = ["run"] + command
        if let fileLimit {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "ulimit -n \(fileLimit) && exec \"$0\" \"$@\"", Self.binaryPath] + command
        } else if let program = launcher.first {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = Array(launcher.dropFirst()) + [Self.binaryPath] + command
        } else {
            process.executableURL = URL(fileURLWithPath: Self.binaryPath)
            process.arguments = command
        }
        var childEnvironment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        // make sanitize: the test process runs without leak detection (the Swift runtime's own
        // allocations would report), the proxy with it, checked when it exits (`terminate`).
        if let options = childEnvironment["SCOPEPROXY_CHILD_ASAN_OPTIONS"] { childEnvironment["ASAN_OPTIONS"] = options }
        process.environment = childEnvironment
        stderrPipe = Pipe()
        process.standardError = stderrPipe
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Read stderr line by line until the listening line (bounded by the pipe's EOF).
        let handle = stderrPipe.fileHandleForReading
        var collected = ""
        var found: UInt16?
        while found == nil {
            let data = handle.availableData
            if data.isEmpty { break }
            collected += String(decoding: data, as: UTF8.self)
            if let line = collected.components(separatedBy: "\n").first(where: { $0.hasPrefix("listening on ") }),
                let portText = line.split(separator: ":").last
            {
                found = UInt16(portText)
            }
        }
        stderrText = collected
        guard let found else {
            process.terminate()
            throw TestSocketError("proxy did not report its address; stderr: \(collected)")
        }
        port = found
        Thread.detachNewThread { [self] in
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                stderrLock.withLock { stderrText += String(decoding: data, as: UTF8.self) }
            }
            stderrClosed.signal()
        }
    }

    public var standardError: String { stderrLock.withLock { stderrText } }

    /// Peak resident set size (VmHWM) in KiB, from /proc.
    public func peakResidentKiB() -> Int? { statusField("VmHWM:") }

    /// Current resident set size (VmRSS) in KiB, from /proc.
    public func residentKiB() -> Int? { statusField("VmRSS:") }

    private func statusField(_ name: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8) else { return nil }
        let line = status.components(separatedBy: "\n").first { $0.hasPrefix(name) }
        return line.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true)[1]) }
    }

    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Runs the binary to completion (for `check`, `secret`, a `run` that must refuse to start).
    public static func runToCompletion(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:])
        throws -> (status: Int32, stdout: String, stderr: String)
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binaryPath)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe(), errors = Pipe(), input = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    /// SIGTERM and wait; returns the exit status. A sanitizer report in the proxy's stderr (leaks
    /// are reported at exit) stops the whole run: under `make sanitize` it is the finding.
    @discardableResult
    public func terminate() -> Int32 {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        if ProcessInfo.processInfo.environment["SCOPEPROXY_SANITIZED"] != nil {
            _ = stderrClosed.wait(timeout: .now() + 5)
            let report = standardError
            if let start = report.range(of: "ERROR: LeakSanitizer") ?? report.range(of: "ERROR: AddressSanitizer")
                ?? report.range(of: "WARNING: ThreadSanitizer")
            {
                fatalError("sanitizer report from the proxy (\(process.arguments ?? [])):\n" + String(report[start.lowerBound...].prefix(6000)))
            }
        }
        return process.terminationStatus
    }

    deinit { if process.isRunning { process.terminate() } }
}

/// The binary on a config written to a scratch directory, with an admin endpoint on a free port
/// (prepended to `yaml`) and `logPath` ready for a `log: { output: ... }` line.
public final class ConfiguredProxy: @unchecked Sendable {
    public let scratch = ScratchDirectory()
    public let adminPort: UInt16
    public let configPath: String
    public let process: ProxyProcess
    public var logPath: String { scratch.path + "/access.log" }
    public var port: UInt16 { process.port }

    /// `yaml` gets the log path to use; the admin address comes first.
    /// The admin port has to be written into the config before the proxy binds it, so another
    /// process can take it in between (a free-port race): then the proxy says so and exits, and a
    /// fresh port is tried (at most three times).
    public init(
        arguments: [String] = [], environment: [String: String] = [:], launcher: [String] = [], yaml: (_ logPath: String) -> String
    ) throws {
        var attempt = 0
        while true {
            attempt += 1
            let port = try TestListener.freePort()
            let path = scratch.write("c.yaml", "admin: \"127.0.0.1:\(port)\"\n" + yaml(scratch.path + "/access.log"))
            do {
                process = try ProxyProcess(arguments: ["--config", path] + arguments, environment: environment, launcher: launcher)
                adminPort = port
                configPath = path
                return
            } catch let error as TestSocketError where attempt < 3 && error.description.contains("cannot listen on admin address") {
                continue
            }
        }
    }

    public func metrics() throws -> String { try adminGet(adminPort, "/metrics")?.bodyText ?? "" }
}
