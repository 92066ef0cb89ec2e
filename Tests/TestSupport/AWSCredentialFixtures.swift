import Foundation
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback AWS credential source (Tests/Fixtures/aws_sts.py or aws_metadata.py) run by the
/// python3 that has botocore: started on port 0, its verdicts read from its JSON-lines log, stopped
/// by closing its stdin (SIGKILL as a fallback).
public final class AWSCredentialFixture: @unchecked Sendable {
    public let port: UInt16
    public let logPath: String
    private let process: Process
    private let stdin: Pipe

    /// `script`: "aws_sts.py" or "aws_metadata.py"; `arguments` after `--log PATH`.
    public init(script: String, arguments: [String]) throws {
        guard let python = SigV4Origin.botocorePython else {
            throw TestSocketError("no python3 here imports botocore (install python3-botocore: make packages-test)")
        }
        logPath = NSTemporaryDirectory() + "scopeproxy-aws-fixture-" + UUID().uuidString + ".jsonl"
        precondition(FileManager.default.createFile(atPath: logPath, contents: Data()), "cannot create \(logPath)")
        process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [SigV4Origin.fixturesDirectory.appendingPathComponent(script).path, "--log", logPath] + arguments
        let output = Pipe()
        stdin = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = stdin
        try process.run()
        let line = fixtureFirstLine(of: output.fileHandleForReading, seconds: 30)
        guard let line, let parsed = UInt16(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            throw TestSocketError("\(script) did not start (said \(line ?? "nothing"))")
        }
        port = parsed
    }

    deinit { stop() }

    public var url: String { "http://127.0.0.1:\(port)" }

    /// Every verdict so far, in order (a request's line is written before it is answered).
    public var verdicts: [[String: Any]] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    public func stop() {
        try? stdin.fileHandleForWriting.close()
        if process.isRunning {
            let exited = DispatchSemaphore(value: 0)
            Thread.detachNewThread { [process] in
                process.waitUntilExit()
                exited.signal()
            }
            if exited.wait(timeout: .now() + 5) == .timedOut {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }
}

/// Runs an `AWSCredentialChain` to its end the way the engine's fetcher does, with blocking
/// sockets: each `.send` goes to its origin, which must be plain http on loopback (a test must never
/// reach 169.254.169.254 or a real STS), and each `.run` through `runCommand`.
public enum AWSChainDriver {
    public struct RefusedOrigin: Error, CustomStringConvertible {
        public let description: String
    }

    /// The steps it took (`purpose` of each request, "run" for a command) and the last step.
    public static func run(
        _ chain: inout AWSCredentialChain, runCommand: ([String]) -> AWSChainInput = { _ in .commandFailed("not allowed here") }
    ) throws -> (steps: [String], result: AWSChainStep) {
        var steps: [String] = []
        var step = chain.start()
        for _ in 0..<16 {
            switch step {
            case .finished, .failed:
                return (steps, step)
            case .run(let argv):
                steps.append("run")
                step = chain.resume(runCommand(argv))
            case .send(let request):
                guard request.origin.scheme == .http, request.origin.host == "127.0.0.1" else {
                    throw RefusedOrigin(description: "the chain asked for \(request.origin), which a test must not reach")
                }
                steps.append(request.purpose)
                let socket = try TestSocket.connect(port: request.origin.port)
                try socket.send(request.bytes)
                let reader = HTTPReader(socket)
                if let response = try reader.readResponse(requestMethod: String(decoding: request.bytes.prefix { $0 != 0x20 }, as: UTF8.self)) {
                    step = chain.resume(.response(status: response.status, body: response.body))
                } else {
                    step = chain.resume(.requestFailed(.closedEarly))
                }
            }
        }
        throw RefusedOrigin(description: "the chain took more than 16 steps")
    }
}
