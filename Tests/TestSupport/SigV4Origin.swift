import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The SigV4-verifying origin (Tests/Fixtures/sigv4_origin.py) on 127.0.0.1, `ports` listeners
/// sharing one set of credentials: each request's signature is recomputed with botocore's signer
/// over what arrived. Stopped with the test (`stop`, also on deinit).
public final class SigV4Origin: @unchecked Sendable {
    public struct Credential: Sendable {
        public let accessKeyID: String
        public let secretAccessKey: String
        public let sessionToken: String?

        public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
        }
    }

    /// One request as the origin received it (a line of its log).
    public struct Received: Sendable {
        public let port: UInt16
        public let method: String
        public let target: String
        public let headers: [(String, String)]
        public let bodyLength: Int
        public let bodySHA256: String
        public let verified: Bool
        public let why: String?

        public func header(_ name: String) -> String? { headers(name).first }
        public func headers(_ name: String) -> [String] { headers.filter { $0.0.lowercased() == name.lowercased() }.map(\.1) }
        /// The path, without the query.
        public var path: String { String(target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]) }
        /// Everything that arrived, for canary searches: target and every field name and value.
        public var allText: String { ([target] + headers.map { "\($0.0): \($0.1)" }).joined(separator: "\n") }
    }

    public let ports: [UInt16]
    public let logPath: String
    /// The python3 that runs the fixture (one that imports botocore).
    public let python: String
    private let process: Process

    static var fixturesDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures")
    }

    /// The first python3 that imports botocore: $SCOPEPROXY_BOTOCORE_PYTHON when set (to run the
    /// suite against another botocore release), Debian's /usr/bin/python3 (python3-botocore, `make
    /// packages-test`), else the python3 on PATH. Nil when none does.
    public static let botocorePython: String? = {
        var candidates = ["/usr/bin/python3"]
        if let chosen = ProcessInfo.processInfo.environment["SCOPEPROXY_BOTOCORE_PYTHON"] { candidates = [chosen] }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            candidates.append("\(directory)/python3")
        }
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            if let result = try? runBounded(candidate, ["-c", "import botocore"], seconds: 30), result.status == 0 {
                return candidate
            }
        }
        return nil
    }()

    public init(credentials: [Credential], ports: Int = 1) throws {
        guard let python = Self.botocorePython else {
            throw TestSocketError("no python3 here imports botocore (install python3-botocore: make packages-test)")
        }
        self.python = python
        logPath = NSTemporaryDirectory() + "scopeproxy-sigv4-origin-" + UUID().uuidString + ".jsonl"
        precondition(FileManager.default.createFile(atPath: logPath, contents: Data()), "cannot create \(logPath)")
        process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        var arguments = [Self.fixturesDirectory.appendingPathComponent("sigv4_origin.py").path, "--log", logPath, "--ports", String(ports)]
        for credential in credentials {
            arguments += ["--credential", credential.accessKeyID, credential.secretAccessKey] + (credential.sessionToken.map { [$0] } ?? [])
        }
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // The first line names the ports; read it on another thread so a fixture that never
        // starts costs a bounded wait, not a hung test.
        let line = fixtureFirstLine(of: output.fileHandleForReading, seconds: 30)
        let parsed = (line ?? "").split(separator: " ").compactMap { UInt16($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard parsed.count == ports else {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            throw TestSocketError("sigv4 origin did not start (said \(line ?? "nothing"))")
        }
        self.ports = parsed
    }

    deinit { stop() }

    public func url(_ index: Int = 0) -> String { "http://127.0.0.1:\(ports[index])" }
    public func authority(_ index: Int = 0) -> String { "127.0.0.1:\(ports[index])" }

    /// Every request received so far, in arrival order. The fixture writes a request's line before
    /// it answers, so once a response is read its request is here.
    public var received: [Received] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            let headers = (object["headers"] as? [[String]] ?? []).compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil }
            return Received(
                port: UInt16(object["port"] as? Int ?? 0), method: object["method"] as? String ?? "",
                target: object["target"] as? String ?? "", headers: headers,
                bodyLength: object["body_length"] as? Int ?? -1, bodySHA256: object["body_sha256"] as? String ?? "",
                verified: object["verified"] as? Bool ?? false, why: object["why"] as? String)
        }
    }

    /// SIGKILL: the child inherits the test thread's blocked-signal mask, so SIGTERM may never land.
    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }

    /// Runs a program to completion with a deadline (killed past it); stdout and stderr together.
    public static func runBounded(_ executable: String, _ arguments: [String], seconds: Int) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        final class Box: @unchecked Sendable { var data = Data() }
        let box = Box()
        let drained = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.data = output.fileHandleForReading.readDataToEndOfFile()
            drained.signal()
        }
        if exited.wait(timeout: .now() + .seconds(seconds)) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            _ = exited.wait(timeout: .now() + 5)
            _ = drained.wait(timeout: .now() + 5)
            return (-1, String(decoding: box.data, as: UTF8.self) + "\n(killed after \(seconds) s)")
        }
        _ = drained.wait(timeout: .now() + 5)
        return (process.terminationStatus, String(decoding: box.data, as: UTF8.self))
    }
}

/// The first line a fixture prints (its port), waited for at most `seconds`: nil when it printed
/// none in time or closed its output first.
func fixtureFirstLine(of handle: FileHandle, seconds: Int) -> String? {
    final class Box: @unchecked Sendable { var text = "" }
    let box = Box()
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        while !box.text.contains("\n") {
            let data = handle.availableData
            if data.isEmpty { break }
            box.text += String(decoding: data, as: UTF8.self)
        }
        done.signal()
    }
    guard done.wait(timeout: .now() + .seconds(seconds)) == .success else { return nil }
    return box.text.split(separator: "\n").first.map(String.init)
}
