import Foundation
import TestSupport
import Testing

struct GRPCOriginError: Error, CustomStringConvertible {
    var description: String { "grpc origin did not start (is grpcio installed? pip install grpcio)" }
}

/// A gRPC origin (Tests/Fixtures/grpc_server.py, grpcio) on 127.0.0.1:0: insecure (h2c only) or
/// TLS with a certificate from the test PKI (ALPN h2 only: an HTTP/1.1 request gets nowhere).
final class GRPCOrigin: @unchecked Sendable {
    let port: UInt16
    let logPath: String
    private let process: Process

    init(certificate: (cert: String, key: String)? = nil) throws {
        logPath = NSTemporaryDirectory() + "scopeproxy-grpc-origin-" + UUID().uuidString + ".log"
        precondition(FileManager.default.createFile(atPath: logPath, contents: Data()), "cannot create \(logPath)")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", GRPCEngineTests.fixture("grpc_server.py"), logPath] + (certificate.map { [$0.cert, $0.key] } ?? [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        guard let port = readPortLine(output) else {
            process.terminate()
            throw GRPCOriginError()
        }
        self.port = port
    }

    /// One object per call: its method, its metadata (pairs) and what it received.
    var calls: [[String: Any]] {
        ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Every metadata value `name` carried, over all calls.
    func metadata(_ name: String) -> [String] {
        calls.flatMap { ($0["metadata"] as? [[String]] ?? []).filter { $0.first == name }.map { $0[1] } }
    }

    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }

    deinit { stop() }
}

/// gRPC end to end through the proxy with grpcio on both sides (generic handlers, no generated
/// code): h2c with prior knowledge on the plain listener, and TLS through the proxy's interception
/// (ALPN h2 both ways). Unary, server streaming (many messages: flow control both ways), client
/// streaming, a non-zero status whose message arrives intact, the scope's `authorization` injected
/// (the client's own never reaches the origin) and a trailer echoing the injected value scrubbed.
@Suite("gRPC through the proxy: HTTP/2 to the origin, trailers relayed and scrubbed", .serialized)
struct GRPCEngineTests {
    static func fixture(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/\(name)").path
    }

    /// Runs grpc_client.py with `plan` and returns its JSON answer (one entry per call).
    private func grpcClient(_ plan: [String: Any]) throws -> [String: [String: Any]] {
        try Wire.runFixture("grpc_client.py", plan: plan) as? [String: [String: Any]] ?? [:]
    }

    private func logLines(_ proxy: ConfiguredProxy, waitingFor count: Int) -> [[String: Any]] {
        Wire.jsonLogLines(proxy, waitingFor: count)
    }

    private static let failMessage = "denied: scope says no (détails ✓ 100%)"

    /// What every gRPC run must show, whichever way the client reached the proxy.
    private func expectCallsRelayed(_ answer: [String: [String: Any]], origin: GRPCOrigin, token: String, clientOwn: String) {
        let masked = "Bearer " + String(repeating: "*", count: token.utf8.count)
        #expect(answer["unary"]?["code"] as? String == "OK", "\(answer)")
        #expect(answer["unary"]?["body"] as? String == "echo:hello auth=" + masked, "the body's echo of the token is masked")
        #expect(answer["unary"]?["trailers"] as? [[String]] == [["x-echo-auth", masked]], "a trailer echoing the token is relayed, masked")
        #expect(answer["stream"]?["count"] as? Int == 200 && answer["stream"]?["ordered"] as? Bool == true, "\(answer["stream"] ?? [:])")
        #expect(answer["collect"]?["body"] as? String == "300/300000")
        #expect(answer["fail"]?["code"] as? String == "PERMISSION_DENIED")
        #expect(answer["fail"]?["details"] as? String == Self.failMessage, "grpc-message arrives intact")
        let authorizations = origin.metadata("authorization")
        #expect(authorizations.count >= 4 && authorizations.allSatisfy { $0 == "Bearer \(token)" }, "the scope's token on every call")
        #expect(!origin.calls.description.contains(clientOwn), "the client's own credential never reached the origin")
    }

    @Test(
        "h2c with prior knowledge (grpc insecure channel): unary, server and client streaming, a status, the token injected and its echo masked in body and trailer"
    )
    func grpcOverH2c() throws {
        let origin = try GRPCOrigin()
        defer { origin.stop() }
        let token = Wire.canary("grpc-h2c-token")
        let proxy = try ConfiguredProxy(environment: ["TOKEN": token]) { logPath in
            """
            log: { output: \(logPath) }
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: api, origins: ["http://127.0.0.1:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
            """
        }
        defer { _ = proxy.process.terminate() }
        let clientOwn = Wire.canary("grpc-client-own")
        let answer = try grpcClient([
            "target": "127.0.0.1:\(proxy.port)", "authority": "127.0.0.1:\(origin.port)",
            "metadata": [["authorization", "Bearer \(clientOwn)"]], "cancel_then_unary": true,
        ])
        expectCallsRelayed(answer, origin: origin, token: token, clientOwn: clientOwn)
        #expect(answer["cancel_then_unary"]?["cancelled"] as? String == "CANCELLED")
        #expect(
            answer["cancel_then_unary"]?["after"] as? String == "OK",
            "a stream the client cancelled ends alone; the shared connection serves the next call")
        let lines = logLines(proxy, waitingFor: 6)
        #expect(lines.count == 6 && lines.allSatisfy { $0["proto"] as? String == "h2c" })
        #expect(lines.first?["scrubbed"] as? [String] == ["token"])
        #expect(try proxy.metrics().contains("scopeproxy_upstream_connections 1"), "every call shared one upstream connection")
    }

    @Test("TLS through the proxy's interception (grpc.http_proxy, the proxy's CA): ALPN h2 to the origin, every call relayed and scrubbed")
    func grpcThroughInterception() throws {
        let pki = try TestPKI()
        let origin = try GRPCOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = Wire.canary("grpc-tls-token")
        let proxy = try Wire.interceptingProxy(originPort: origin.port, upstreamCA: pki.caPath, token: token)
        defer { _ = proxy.process.terminate() }
        let clientOwn = Wire.canary("grpc-client-own")
        let answer = try grpcClient([
            "target": "localhost:\(origin.port)", "proxy": "http://127.0.0.1:\(proxy.port)",
            "ca": proxy.scratch.path + "/ca/scopeproxy-ca.pem", "metadata": [["authorization", "Bearer \(clientOwn)"]],
        ])
        expectCallsRelayed(answer, origin: origin, token: token, clientOwn: clientOwn)
        let lines = logLines(proxy, waitingFor: 4).filter { $0["method"] as? String == "POST" }
        #expect(lines.count == 4 && lines.allSatisfy { $0["proto"] as? String == "h2" })
    }

    @Test(
        "forty calls started at once share one upstream connection (RFC 9113 §9.1): h2c, where each waits for the origin's SETTINGS, and TLS, where each waits for ALPN"
    )
    func concurrentCallsOpenOneUpstreamConnection() throws {
        let pki = try TestPKI()
        let plainOrigin = try GRPCOrigin()
        defer { plainOrigin.stop() }
        let proxy = try ConfiguredProxy { logPath in "log: { output: \(logPath) }" }
        defer { _ = proxy.process.terminate() }
        let plain = try grpcClient(["target": "127.0.0.1:\(proxy.port)", "authority": "127.0.0.1:\(plainOrigin.port)", "concurrent_unary": 40])
        #expect(plain["concurrent"]?["ok"] as? Int == 40, "\(plain)")
        #expect(try proxy.metrics().contains("scopeproxy_upstream_connections 1"), "h2c: forty streams, one connection to the origin")

        let tlsOrigin = try GRPCOrigin(certificate: pki.certificate("valid"))
        defer { tlsOrigin.stop() }
        let intercepting = try Wire.interceptingProxy(originPort: tlsOrigin.port, upstreamCA: pki.caPath, token: Wire.canary("grpc-herd-token"))
        defer { _ = intercepting.process.terminate() }
        let tls = try grpcClient([
            "target": "localhost:\(tlsOrigin.port)", "proxy": "http://127.0.0.1:\(intercepting.port)",
            "ca": intercepting.scratch.path + "/ca/scopeproxy-ca.pem", "concurrent_unary": 40,
        ])
        #expect(tls["concurrent"]?["ok"] as? Int == 40, "\(tls)")
        #expect(try intercepting.metrics().contains("scopeproxy_upstream_connections 1"), "TLS: forty streams, one handshake with the origin")
    }

    @Test("an origin no scope covers gets no credential over h2c, not even the client's own (stripped, as over HTTP/1.1)")
    func unscopedGRPCOriginGetsNoCredential() throws {
        let origin = try GRPCOrigin()
        defer { origin.stop() }
        let scoped = try GRPCOrigin()
        defer { scoped.stop() }
        let token = Wire.canary("grpc-elsewhere-token")
        let proxy = try ConfiguredProxy(environment: ["TOKEN": token]) { logPath in
            """
            log: { output: \(logPath) }
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: api, origins: ["http://127.0.0.1:\(scoped.port)"], inject: { Authorization: "Bearer ${token}" } }]
            """
        }
        defer { _ = proxy.process.terminate() }
        let clientOwn = Wire.canary("grpc-client-own")
        let answer = try grpcClient([
            "target": "127.0.0.1:\(proxy.port)", "authority": "127.0.0.1:\(origin.port)",
            "metadata": [["authorization", "Bearer \(clientOwn)"]], "stream_count": 3, "collect_count": 3,
        ])
        #expect(answer["unary"]?["body"] as? String == "echo:hello auth=-", "\(answer)")
        #expect(answer["unary"]?["trailers"] as? [[String]] == [["x-echo-auth", "-"]])
        #expect(origin.metadata("authorization").isEmpty)
        #expect(!origin.calls.description.contains(token) && !origin.calls.description.contains(clientOwn))
        #expect(scoped.calls.isEmpty)
    }

    /// One gRPC message (uncompressed): the flag, the length, the payload.
    private static func grpcFrame(_ payload: String) -> Data {
        let bytes = Array(payload.utf8)
        var frame = Data([0])
        withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { frame.append(contentsOf: $0) }
        frame.append(contentsOf: bytes)
        return frame
    }

    @Test(
        "curl through the proxy to an HTTP/2-only TLS origin: with --http2 (h2 both sides) and with --http1.1 (an HTTP/1.1 client, h2 to the origin); the token injected, its echo masked",
        arguments: ["--http2", "--http1.1"])
    func curlToHTTP2OnlyOrigin(_ version: String) throws {
        let pki = try TestPKI()
        let origin = try GRPCOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = Wire.canary("curl-h2-token")
        let proxy = try Wire.interceptingProxy(originPort: origin.port, upstreamCA: pki.caPath, token: token)
        defer { _ = proxy.process.terminate() }
        let scratch = ScratchDirectory()
        let body = scratch.path + "/message"
        try Self.grpcFrame("from-curl").write(to: URL(fileURLWithPath: body))
        let (status, output) = try curl([
            version, "-x", "http://127.0.0.1:\(proxy.port)", "--cacert", proxy.scratch.path + "/ca/scopeproxy-ca.pem",
            "-H", "content-type: application/grpc", "-H", "te: trailers", "--data-binary", "@\(body)",
            "-w", "\n%{http_version} %{http_code}", "https://localhost:\(origin.port)/svc/Unary",
        ])
        #expect(status == 0)
        let masked = "Bearer " + String(repeating: "*", count: token.utf8.count)
        #expect(output.contains("echo:from-curl auth=" + masked), "\(output.suffix(200))")
        #expect(output.hasSuffix(version == "--http2" ? "\n2 200" : "\n1.1 200"))
        #expect(origin.metadata("authorization") == ["Bearer \(token)"])
    }
}
