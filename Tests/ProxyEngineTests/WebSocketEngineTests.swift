import Foundation
import ScopePolicy
import TestSupport
import Testing

/// WebSocket frames under the guard (docs/security-model.md): real clients and origins (python
/// `websockets`, Tests/Fixtures/websocket_check.py) on either side of the engine. Assertions
/// compare digests, counts and booleans, never a message that could hold a value.
@Suite("Engine: WebSocket frames pass the guard, placeholders and the scrub", .serialized)
struct WebSocketEngineTests {
    static let value = "GHV-" + SecretTrafficEngineTests.randomHex() + "-real"
    static let injected = "INJ-" + SecretTrafficEngineTests.randomHex() + "-tk"
    static var placeholder: String { Placeholder.text(secret: "gh_token", key: ProxyHarness.placeholderKey) }
    static let secrets = ["gh_token": value, "api_token": injected]

    /// `scoped: true`: the origin is the scope's (gh_token substituted, api_token injected).
    static func yaml(originPort: UInt16, scoped: Bool, extra: String = "") -> String {
        let origin = scoped ? "http://127.0.0.1:\(originPort)" : "http://127.0.0.2:1"
        return """
            secrets:
              gh_token: { env: GH, placeholder: true, env_var: GITHUB_TOKEN }
              api_token: { env: API }
            scopes:
              - name: gh
                origins: ["\(origin)"]
                require_https: false
                substitute: [gh_token]
                inject: { X-Token: "${api_token}" }
            \(extra)
            """
    }

    struct Described: Decodable {
        let kind: String
        let length: Int
        let sha256: String
        let contains: [Bool]
        let stars: Int
    }

    struct Outcome: Decodable {
        let handshake: String
        let client_received: [Described]
        let close_code: Int?
        let origin_received: [Described]
        let origin_extensions: [String?]
        let client_extensions: String?
        let sent_sha256: String?
    }

    /// Runs the fixture: its origin first, then a proxy configured for that origin's port, then its
    /// client through the proxy.
    static func run(
        _ scenario: [String: Any], proxy makeProxy: (UInt16) throws -> ProxyHarness
    ) throws -> Outcome {
        try run(scenario) { originPort in
            let proxy = try makeProxy(originPort)
            return (proxy.port, nil, { proxy.stop() })
        }
    }

    /// `proxy`: starts a proxy for the origin's port; returns its port, the CA file a client of an
    /// intercepted tunnel trusts (nil: absolute-form requests), and how to stop it.
    static func run(
        _ scenario: [String: Any], proxy makeProxy: (UInt16) throws -> (port: UInt16, caPath: String?, stop: () -> Void)
    ) throws -> Outcome {
        try runFixture("websocket_check.py", scenario, proxy: makeProxy)
    }

    /// Runs a WebSocket fixture (Tests/Fixtures) that starts its own origin, prints its port, reads
    /// the proxy's port and CA from stdin, then prints one JSON outcome: the origin first, then a
    /// proxy for its port (`makeProxy`), then the client through the proxy.
    static func runFixture<Result: Decodable>(
        _ fixture: String, _ scenario: [String: Any], proxy makeProxy: (UInt16) throws -> (port: UInt16, caPath: String?, stop: () -> Void)
    ) throws -> Result {
        let python = try #require(websocketsPython, "no python3 here imports websockets (pip install websockets)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/\(fixture)").path
        process.arguments = [script, String(decoding: try JSONSerialization.data(withJSONObject: scenario), as: UTF8.self)]
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let lines = LineReader(output.fileHandleForReading)
        let originPort = try #require(lines.next(seconds: 30).flatMap { UInt16($0) }, "the fixture's origin did not start")
        let proxy = try makeProxy(originPort)
        defer { proxy.stop() }
        input.fileHandleForWriting.write(Data("\(proxy.port) \(proxy.caPath ?? "-")\n".utf8))
        let line = try #require(lines.next(seconds: 120), "the fixture did not finish")
        return try JSONDecoder().decode(Result.self, from: Data(line.utf8))
    }

    static let websocketsPython: String? = {
        for candidate in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map({ "\($0)/python3" })
            + ["/usr/bin/python3"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            if let result = try? SigV4Origin.runBounded(candidate, ["-c", "import websockets"], seconds: 30), result.status == 0 {
                return candidate
            }
        }
        return nil
    }()

    @Test("a secret value in a client text frame never reaches the origin; the client gets close 1008, nothing after goes")
    func canaryInClientFrameBlocked() throws {
        let outcome = try Self.run(
            [
                "client_sends": [["text": "hello"], ["text": "token=\(Self.injected);"], ["text": "after"]],
                "contains": [Self.injected, "after"], "expect_replies": 3, "lockstep": true,
            ],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: false), secrets: Self.secrets) })
        #expect(outcome.handshake == "ok")
        #expect(outcome.close_code == 1008, "policy violation")
        #expect(outcome.origin_received.count == 1, "only the first message reached the origin")
        #expect(outcome.client_received.count == 1, "its echo came back, nothing after the close")
        let leaked = outcome.origin_received.contains { $0.contains[0] || $0.contains[1] }
        #expect(!leaked)
    }

    @Test("a value split across two fragments of one message is found: close 1008, the origin gets neither half's message")
    func valueSplitAcrossFragmentsBlocked() throws {
        let half = Self.injected.count / 2
        let first = String(Self.injected.prefix(half))
        let second = String(Self.injected.dropFirst(half))
        let outcome = try Self.run(
            [
                "client_sends": [["fragments": ["x=" + first, second + ";"]]],
                "contains": [Self.injected], "expect_replies": 1,
            ],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: false), secrets: Self.secrets) })
        #expect(outcome.close_code == 1008)
        #expect(outcome.origin_received.isEmpty)
    }

    @Test("a placeholder in a client frame to its scope's origin arrives as the value; the echo comes back as stars")
    func placeholderSubstitutedAndEchoScrubbed() throws {
        let outcome = try Self.run(
            ["client_sends": [["text": "auth \(Self.placeholder) end"]], "contains": [Self.value], "expect_replies": 1],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: true), secrets: Self.secrets) })
        #expect(outcome.close_code == 1000)
        #expect(outcome.origin_received.count == 1)
        #expect(outcome.origin_received.first?.contains == [true], "the origin got the value")
        #expect(outcome.client_received.first?.contains == [false], "the echo is scrubbed")
        #expect(outcome.client_received.first?.stars == Self.value.utf8.count)
    }

    @Test("a placeholder in a client frame to another origin is refused: close 1008, the origin gets nothing")
    func placeholderOutOfScopeRefused() throws {
        let outcome = try Self.run(
            ["client_sends": [["text": "auth \(Self.placeholder) end"]], "expect_replies": 1],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: false), secrets: Self.secrets) })
        #expect(outcome.close_code == 1008)
        #expect(outcome.origin_received.isEmpty)
    }

    @Test("an origin frame carrying a value its scope injects arrives masked with `*`, same length")
    func originFrameScrubbed() throws {
        let text = "leak: \(Self.injected) done"
        let outcome = try Self.run(
            ["origin_sends": [text], "contains": [Self.injected], "expect_replies": 1],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: true), secrets: Self.secrets) })
        let received = try #require(outcome.client_received.first)
        #expect(received.contains == [false])
        #expect(received.length == text.utf8.count)
        #expect(received.stars == Self.injected.utf8.count)
    }

    @Test("permessage-deflate is not offered to the origin where frames are read, and the client speaks plain frames")
    func deflateNotOffered() throws {
        let outcome = try Self.run(
            ["client_sends": [["text": "hello"]], "expect_replies": 1],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: false), secrets: Self.secrets) })
        #expect(outcome.origin_extensions == [nil])
        #expect(outcome.client_extensions == nil)
        #expect(outcome.close_code == 1000)
        #expect(outcome.client_received.count == 1)
    }

    @Test("a 1 MiB binary message streams through both ways intact")
    func largeBinaryMessage() throws {
        let outcome = try Self.run(
            ["client_sends": [["binary_size": 1 << 20]], "expect_replies": 1],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: true), secrets: Self.secrets) })
        #expect(outcome.origin_received.first?.length == 1 << 20)
        #expect(outcome.origin_received.first?.sha256 == outcome.sent_sha256)
        #expect(outcome.client_received.first?.sha256 == outcome.sent_sha256)
    }

    @Test(
        "wss inside an intercepted TLS tunnel (the binary, CONNECT by the client library): a value in a client frame is stopped with close 1008 and the line says so, names only"
    )
    func interceptedTunnelGuarded() throws {
        let pki = try TestPKI()
        let certificate = pki.certificate("valid")
        var configured: ConfiguredProxy?
        let outcome = try Self.run(
            [
                "client_sends": [["text": "hello"], ["text": "token=\(Self.injected);"]], "contains": [Self.injected],
                "expect_replies": 2, "lockstep": true, "origin_tls": ["cert": certificate.cert, "key": certificate.key],
            ],
            proxy: { originPort in
                let proxy = try ConfiguredProxy(environment: ["API": Self.injected]) { logPath in
                    let directory = (logPath as NSString).deletingLastPathComponent
                    return """
                        secrets: { api_token: { env: API } }
                        scopes: [{ name: other, origins: ["https://other.example"], inject: { X-Token: "${api_token}" } }]
                        tls: { intercept: ["localhost"], tunnel: deny, ca_dir: \(directory)/ca, upstream_ca: \(pki.caPath) }
                        log: { output: \(logPath), format: json }
                        """
                }
                configured = proxy
                return (proxy.port, proxy.scratch.path + "/ca/scopeproxy-ca.pem", { proxy.process.terminate() })
            })
        #expect(outcome.handshake == "ok")
        #expect(outcome.close_code == 1008)
        #expect(outcome.origin_received.count == 1 && outcome.origin_received.allSatisfy { !$0.contains[0] })
        let log = (try? String(contentsOfFile: configured?.logPath ?? "", encoding: .utf8)) ?? ""
        let line = log.split(separator: "\n").first { $0.contains("\"websocket\"") }.map(String.init) ?? ""
        #expect(line.contains("secret_egress_blocked"), "the upgrade's line names the refusal")
        #expect(line.contains("api_token"), "and the secret by name")
        let leakedToLog = log.contains(Self.injected)
        #expect(!leakedToLog, "never its value")
    }

    @Test("an unscoped origin with the guard off is spliced: the extension offer and the frames pass as they are")
    func unscopedWithGuardOffSpliced() throws {
        let outcome = try Self.run(
            ["client_sends": [["text": "token=\(Self.injected);"]], "contains": [Self.injected], "expect_replies": 1],
            proxy: { try ProxyHarness(yaml: Self.yaml(originPort: $0, scoped: false, extra: "guard: off"), secrets: Self.secrets) })
        #expect(outcome.origin_extensions.first??.contains("permessage-deflate") == true, "the offer went through unread")
        #expect(outcome.origin_received.first?.contains == [true])
        #expect(outcome.close_code == 1000)
    }
}

/// Lines of a child's output, each waited for at most a bounded time (a fixture that hangs fails the test, never stalls it).
final class LineReader: @unchecked Sendable {
    private let handle: FileHandle
    private var buffer = Data()

    init(_ handle: FileHandle) { self.handle = handle }

    func next(seconds: Int) -> String? {
        let deadline = DispatchTime.now() + .seconds(seconds)
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            let done = DispatchSemaphore(value: 0)
            final class Box: @unchecked Sendable { var data = Data() }
            let box = Box()
            Thread.detachNewThread { [handle] in
                box.data = handle.availableData
                done.signal()
            }
            guard done.wait(timeout: deadline) == .success, !box.data.isEmpty else { return nil }
            buffer.append(box.data)
        }
    }
}
