import Foundation
import TestSupport

/// The binary run with a deadline: a command line that should be refused must not start a proxy,
/// and if it did, the test fails on `timedOut` instead of hanging the suite.
struct Outcome {
    let status: Int32
    let stdout: String
    let stderr: String
    let timedOut: Bool
}

func runBinary(
    _ arguments: [String], stdin: String = "", environment: [String: String] = [:], removing: [String] = [],
    seconds: Double = 10, workingDirectory: String? = nil
) throws -> Outcome {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: ProxyProcess.binaryPath)
    process.arguments = arguments
    if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
    var childEnvironment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    for name in removing { childEnvironment[name] = nil }
    process.environment = childEnvironment
    let output = Pipe(), errors = Pipe(), input = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = input
    try process.run()
    input.fileHandleForWriting.write(Data(stdin.utf8))
    try input.fileHandleForWriting.close()
    // Read both pipes on their own threads: a child filling one pipe must not stall on the other.
    let collected = Collected()
    let group = DispatchGroup()
    for (handle, isError) in [(output.fileHandleForReading, false), (errors.fileHandleForReading, true)] {
        group.enter()
        Thread.detachNewThread {
            let data = handle.readDataToEndOfFile()
            collected.set(String(decoding: data, as: UTF8.self), isError: isError)
            group.leave()
        }
    }
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(10_000) }
    let timedOut = process.isRunning
    if timedOut { process.terminate() }
    process.waitUntilExit()
    _ = group.wait(timeout: .now() + 5)
    return Outcome(status: process.terminationStatus, stdout: collected.stdout, stderr: collected.stderr, timedOut: timedOut)
}

private final class Collected: @unchecked Sendable {
    private let lock = NSLock()
    private var out = "", err = ""
    func set(_ text: String, isError: Bool) { lock.withLock { if isError { err = text } else { out = text } } }
    var stdout: String { lock.withLock { out } }
    var stderr: String { lock.withLock { err } }
}

// glibc's pseudo-terminal calls are declared only under _XOPEN_SOURCE, which the Glibc module
// does not define; they are plain C functions of ints and pointers, so they are bound by name.
@_silgen_name("posix_openpt") private func c_posix_openpt(_ flags: Int32) -> Int32
@_silgen_name("grantpt") private func c_grantpt(_ fd: Int32) -> Int32
@_silgen_name("unlockpt") private func c_unlockpt(_ fd: Int32) -> Int32
@_silgen_name("ptsname_r") private func c_ptsname_r(_ fd: Int32, _ buffer: UnsafeMutablePointer<CChar>, _ length: Int) -> Int32

/// A pseudo-terminal pair: the child gets `follower` as a terminal; the test types into and reads
/// from `leader`.
final class PseudoTerminal {
    let leader: Int32
    let follower: Int32

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    init() throws {
        leader = c_posix_openpt(O_RDWR | O_NOCTTY)
        var name = [CChar](repeating: 0, count: 128)
        guard leader >= 0, c_grantpt(leader) == 0, c_unlockpt(leader) == 0, c_ptsname_r(leader, &name, name.count) == 0 else {
            throw Failure(description: "cannot open a pseudo-terminal: \(String(cString: strerror(errno)))")
        }
        follower = open(name, O_RDWR | O_NOCTTY)
        guard follower >= 0 else {
            throw Failure(description: "cannot open \(String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
        }
    }

    deinit {
        close(leader)
        close(follower)
    }

    var followerHandle: FileHandle { FileHandle(fileDescriptor: follower, closeOnDealloc: false) }

    /// Whether the terminal echoes typed input now (ECHO in c_lflag).
    var echoes: Bool {
        // A buffer, not a `termios()` value: the C library writes more than Swift's imported struct holds.
        let settings = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 16)
        defer { settings.deallocate() }
        let terminal = settings.bindMemory(to: termios.self, capacity: 1)
        tcgetattr(follower, terminal)
        return terminal.pointee.c_lflag & tcflag_t(ECHO) != 0
    }

    func type(_ text: String) {
        _ = text.withCString { write(leader, $0, strlen($0)) }
    }

    /// What the terminal showed (echo and the child's output to it), read until `until` appears
    /// or `seconds` pass.
    func read(until: String? = nil, seconds: Double = 5) -> String {
        var collected = [UInt8]()
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            var poller = pollfd(fd: leader, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else {
                if until == nil && !collected.isEmpty { break }
                continue
            }
            let count = Glibc.read(leader, &buffer, buffer.count)
            if count <= 0 { break }
            collected += buffer[..<count]
            if let until, String(decoding: collected, as: UTF8.self).contains(until) { break }
        }
        return String(decoding: collected, as: UTF8.self)
    }
}

/// Reads a pipe incrementally (a child's stderr while it is still running).
final class PipeReader: @unchecked Sendable {
    private let lock = NSLock()
    private var text = ""

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                lock.withLock { text += String(decoding: data, as: UTF8.self) }
            }
        }
    }

    var contents: String { lock.withLock { text } }

    /// Waits (bounded) until `needle` has arrived; returns whether it did.
    func wait(for needle: String, seconds: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if contents.contains(needle) { return true }
            usleep(10_000)
        }
        return contents.contains(needle)
    }
}

/// Waits at most `seconds` for the process to exit; kills it (and returns false) otherwise, so a
/// test that fails does not hang the suite.
func waitBounded(_ process: Process, seconds: Double = 5) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(10_000) }
    guard process.isRunning else { return true }
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
    return false
}

/// The repository root (for config/ examples), from this file's path.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
