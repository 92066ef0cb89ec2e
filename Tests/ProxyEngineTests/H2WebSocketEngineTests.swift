import Foundation
import ScopePolicy
import TestSupport
import Testing

/// WebSocket over HTTP/2 (RFC 8441): a python `h2` client sends the extended CONNECT and masked
/// frames in DATA, a python `websockets` origin answers (Tests/Fixtures/h2_websocket_check.py). The
/// frames meet the rules an HTTP/1.1 upgrade's frames meet (`WebSocketEngineTests`): the same
/// canaries, checked by digests, counts and booleans, never a value.
@Suite("HTTP/2: WebSocket over extended CONNECT under the guard, placeholders and the scrub", .serialized)
struct H2WebSocketEngineTests {
    typealias Described = WebSocketEngineTests.Described

    struct OriginRequest: Decodable {
        let has_key: Bool
        let extensions: String?
        let contains: [Bool]
    }

    struct Outcome: Decodable {
        let error: String?
        let sent_sha256: String?
        let settings_enable_connect_protocol: Int?
        let status: Int?
        let headers: [String: String]?
        let client_received: [Described]?
        let close_code: Int?
        let ended: String?
        let sibling_status: Int?
        let sibling_ended_before_next: Bool?
        let reset_statuses: [String: Int]?
        let goaway: Int?
        let origin_received: [Described]
        let origin_requests: [OriginRequest]
    }

    /// The fixture's origin first, then a proxy for its port, then the client through the proxy.
    static func run(
        _ scenario: [String: Any], proxy makeProxy: (UInt16) throws -> (port: UInt16, caPath: String?, stop: () -> Void)
    ) throws -> Outcome {
        try WebSocketEngineTests.runFixture("h2_websocket_check.py", scenario, proxy: makeProxy)
    }

    static func harness(scoped: Bool) -> (UInt16) throws -> (port: UInt16, caPath: String?, stop: () -> Void) {
        { originPort in
            let proxy = try ProxyHarness(
                yaml: WebSocketEngineTests.yaml(originPort: originPort, scoped: scoped), secrets: WebSocketEngineTests.secrets)
            return (proxy.port, nil, { proxy.stop() })
        }
    }

    @Test(
        "h2c: the proxy announces ENABLE_CONNECT_PROTOCOL; a secret value in a client frame never reaches the origin, the client gets close 1008 and END_STREAM"
    )
    func canaryInClientFrameBlocked() throws {
        let injected = WebSocketEngineTests.injected
        let outcome = try Self.run(
            ["client_sends": ["hello", "token=\(injected);", "after"], "contains": [injected, "after"]],
            proxy: Self.harness(scoped: false))
        #expect(outcome.error == nil)
        #expect(outcome.settings_enable_connect_protocol == 1)
        #expect(outcome.status == 200)
        #expect(outcome.headers?["sec-websocket-accept"] == nil, "HTTP/2 carries no accept (RFC 8441 §5)")
        #expect(outcome.origin_requests.first?.has_key == true, "the origin got the proxy's key")
        #expect(outcome.origin_requests.first?.extensions == nil, "the deflate offer is removed where frames are read")
        #expect(outcome.close_code == 1008, "policy violation")
        #expect(outcome.ended == "end_stream", "the close frame, then END_STREAM (not a reset that could drop it)")
        #expect(outcome.origin_received.count == 1, "only the first message reached the origin")
        #expect(outcome.client_received?.count == 1, "its echo came back, nothing after the close")
        #expect(!outcome.origin_received.contains { $0.contains[0] || $0.contains[1] })
    }

    @Test("a placeholder in a client frame arrives as the value at its scope's origin; the echo comes back as stars; the injected token's echo too")
    func placeholderSubstitutedAndEchoesScrubbed() throws {
        let value = WebSocketEngineTests.value, injected = WebSocketEngineTests.injected
        let outcome = try Self.run(
            [
                "client_sends": ["auth \(WebSocketEngineTests.placeholder) end"], "contains": [value, injected],
                "origin_echoes_header": "X-Token",
            ],
            proxy: Self.harness(scoped: true))
        #expect(outcome.status == 200)
        #expect(outcome.origin_requests.first?.contains == [false, true], "the scope's token was injected into the upgrade request")
        #expect(outcome.origin_received.count == 1)
        #expect(outcome.origin_received.first?.contains == [true, false], "the origin got the value")
        let received = outcome.client_received ?? []
        #expect(received.count == 2)
        #expect(received.allSatisfy { $0.contains == [false, false] }, "neither value reaches the client")
        #expect(received.first?.stars == injected.utf8.count, "the header echo is scrubbed")
        #expect(received.last?.stars == value.utf8.count, "the message echo is scrubbed")
        #expect(outcome.close_code == 1000 && outcome.ended == "end_stream")
    }

    @Test("a placeholder in a client frame to an origin no scope of it covers is refused: close 1008, nothing reaches the origin")
    func placeholderOutOfScopeRefused() throws {
        let outcome = try Self.run(
            ["client_sends": ["auth \(WebSocketEngineTests.placeholder) end"], "contains": [WebSocketEngineTests.value, "auth"]],
            proxy: Self.harness(scoped: false))
        #expect(outcome.status == 200)
        #expect(outcome.close_code == 1008)
        #expect(outcome.origin_received.isEmpty)
    }

    @Test("a plain stream on the same connection is answered while the WebSocket stream is open, which then goes on")
    func siblingStreamFlows() throws {
        let outcome = try Self.run(
            ["client_sends": ["one", "two"], "sibling_after_first": true, "contains": ["one"]], proxy: Self.harness(scoped: false))
        #expect(outcome.status == 200)
        #expect(outcome.sibling_status != nil, "the plain stream got its answer")
        #expect(outcome.sibling_ended_before_next == true, "while the WebSocket stream stayed open")
        #expect(outcome.client_received?.count == 2, "both echoes, the second after the sibling ended")
        #expect(outcome.close_code == 1000)
    }

    @Test("a 4 MiB binary message streams through both ways intact: the stream's window is credited as the proxy forwards (16 windows' worth)")
    func largeMessageUnderFlowControl() throws {
        let outcome = try Self.run(["client_sends": [["binary_size": 4 << 20]]], proxy: Self.harness(scoped: true))
        #expect(outcome.error == nil)
        #expect(outcome.origin_received.first?.length == 4 << 20)
        #expect(outcome.origin_received.first?.sha256 == outcome.sent_sha256)
        #expect(outcome.client_received?.first?.sha256 == outcome.sent_sha256)
        #expect(outcome.close_code == 1000)
    }

    @Test("the tail of a fragment the guard holds back leaves on the idle timer: the client waits for its echo before it ends the message")
    func heldBackTailReleasedWhenIdle() throws {
        let half = String(WebSocketEngineTests.injected.prefix(WebSocketEngineTests.injected.count / 2))
        let outcome = try Self.run(
            ["client_fragment": "ends with " + half, "origin_echoes_fragments": true, "contains": [half]], proxy: Self.harness(scoped: false))
        #expect(outcome.error == nil)
        #expect(outcome.origin_received.contains { $0.contains == [true] }, "the held tail reached the origin before the message ended")
        #expect(outcome.close_code == 1000)
    }

    @Test("WebSockets the client opens and then resets (RST_STREAM CANCEL, 110: past the rapid-reset minimum) are no rapid reset")
    func resetWebSocketsAreNoRapidReset() throws {
        let outcome = try Self.run(["reset_first": 110, "client_sends": ["after"]], proxy: Self.harness(scoped: false))
        #expect(outcome.error == nil)
        #expect(outcome.goaway == nil, "no GOAWAY")
        #expect(outcome.reset_statuses == ["200": 110])
        #expect(outcome.status == 200 && outcome.client_received?.count == 1 && outcome.close_code == 1000)
    }

    @Test("the client's END_STREAM sent before the 200 (with its one frame): the frame reaches the origin, then the stream ends")
    func clientFinBeforeTheSwitch() throws {
        let outcome = try Self.run(["early_fin": "only", "contains": ["only"]], proxy: Self.harness(scoped: false))
        #expect(outcome.error == nil, "the stream ended")
        #expect(outcome.status == 200 && outcome.ended == "end_stream")
        #expect(outcome.origin_received.count == 1 && outcome.origin_received.first?.contains == [true])
    }

    @Test("extended CONNECT with a :protocol other than websocket: 501 connect_over_http2_unsupported, nothing reaches the origin")
    func otherProtocolRefused() throws {
        let outcome = try Self.run(["protocol": "foo"], proxy: Self.harness(scoped: false))
        #expect(outcome.settings_enable_connect_protocol == 1)
        #expect(outcome.status == 501)
        #expect(outcome.origin_requests.isEmpty)
    }

    /// The proxy a test started, kept to read its log afterwards (the test's thread only).
    final class Kept {
        var proxy: ConfiguredProxy?
    }

    /// The binary intercepting `localhost` (its origin speaks wss with a certificate of `pki`), the
    /// access log in JSON; `configured` keeps it for the test to read its log.
    static func interceptingBinary(_ pki: TestPKI, keep configured: Kept = Kept())
        -> (UInt16) throws -> (port: UInt16, caPath: String?, stop: () -> Void)
    {
        { _ in
            let proxy = try ConfiguredProxy(environment: ["API": WebSocketEngineTests.injected]) { logPath in
                let directory = (logPath as NSString).deletingLastPathComponent
                return """
                    secrets: { api_token: { env: API } }
                    scopes: [{ name: other, origins: ["https://other.example"], inject: { X-Token: "${api_token}" } }]
                    tls: { intercept: ["localhost"], tunnel: deny, ca_dir: \(directory)/ca, upstream_ca: \(pki.caPath) }
                    log: { output: \(logPath), format: json }
                    """
            }
            configured.proxy = proxy
            return (proxy.port, proxy.scratch.path + "/ca/scopeproxy-ca.pem", { proxy.process.terminate() })
        }
    }

    @Test(
        "h2 inside an intercepted TLS tunnel (the binary): a value in a client frame is stopped with close 1008; one line, proto websocket, names only"
    )
    func interceptedTunnelGuarded() throws {
        let pki = try TestPKI()
        let certificate = pki.certificate("valid")
        let configured = Kept()
        let injected = WebSocketEngineTests.injected
        let outcome = try Self.run(
            [
                "tunnel": true, "origin_tls": ["cert": certificate.cert, "key": certificate.key],
                "client_sends": ["hello", "token=\(injected);"], "contains": [injected],
            ],
            proxy: Self.interceptingBinary(pki, keep: configured))
        #expect(outcome.error == nil)
        #expect(outcome.status == 200)
        #expect(outcome.close_code == 1008 && outcome.ended == "end_stream")
        #expect(outcome.origin_received.count == 1 && outcome.origin_received.allSatisfy { !$0.contains[0] })
        let log = configured.proxy.flatMap { try? String(contentsOfFile: $0.logPath, encoding: .utf8) } ?? ""
        let lines = log.split(separator: "\n").filter { $0.contains("\"proto\":\"websocket\"") }
        #expect(lines.count == 1, "one line for the WebSocket")
        let line = lines.first.map(String.init) ?? ""
        #expect(line.contains("secret_egress_blocked") && line.contains("api_token"), "the line names the refusal and the secret by name")
        #expect(line.contains("\"status\":200"), "the status the client got")
        let leakedToLog = log.contains(injected)
        #expect(!leakedToLog, "never its value")
    }

    @Test("wss inside a tunnel: the client's END_STREAM right behind its frame; the frame reaches the TLS origin before its connection is let go")
    func clientFinWaitsForTheTLSLeg() throws {
        let pki = try TestPKI()
        let certificate = pki.certificate("valid")
        let outcome = try Self.run(
            ["tunnel": true, "origin_tls": ["cert": certificate.cert, "key": certificate.key], "early_fin": "only", "contains": ["only"]],
            proxy: Self.interceptingBinary(pki))
        #expect(outcome.error == nil)
        #expect(outcome.status == 200 && outcome.ended == "end_stream")
        #expect(outcome.origin_received.count == 1 && outcome.origin_received.first?.contains == [true], "nothing lost in the leg's output")
    }

    @Test("inside an intercepted tunnel, an extended CONNECT whose :authority names another origin is 421 and reaches no origin")
    func misdirectedInTunnel() throws {
        let pki = try TestPKI()
        let certificate = pki.certificate("valid")
        let outcome = try Self.run(
            ["tunnel": true, "origin_tls": ["cert": certificate.cert, "key": certificate.key], "authority": "elsewhere.example"],
            proxy: Self.interceptingBinary(pki))
        #expect(outcome.status == 421)
        #expect(outcome.origin_requests.isEmpty)
    }
}
