import Foundation
import ProxyCore
import ProxyEngine
import ScopeConfig
import ScopePolicy
import ScopeProxyApp
import TestSupport
import Testing

/// HTTP/2 from clients, end to end with independent clients: curl (`--http2`, `--http2-prior-knowledge`),
/// python `h2` (Tests/Fixtures/h2_client.py: several streams on one connection, resets, floods) and
/// `httpx` with `http2=True`. Every stream is one exchange: each test plants canaries and checks
/// where they arrived, per stream.
@Suite("HTTP/2: every rule per stream, h2c and intercepted h2, the flood limits", .serialized)
struct H2EngineTests {
    /// The binary with one scope injecting `token` into `origin` (plain http), h2c on its plain port.
    private func h2cProxy(_ origin: FixtureOrigin, token: String, extra: String = "") throws -> ConfiguredProxy {
        try ConfiguredProxy(environment: ["TOKEN": token]) { logPath in
            """
            log: { output: \(logPath) }
            secrets: { token: { env: TOKEN } }
            scopes:
              - { name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" }, paths: ["/v1/"] }
            \(extra)
            """
        }
    }

    /// Runs h2_client.py with `plan` (see the script) and returns its JSON answer.
    private func h2Client(_ plan: [String: Any]) throws -> [String: Any] { try Wire.h2Client(plan) }

    private func streams(_ answer: [String: Any]) -> [[String: Any]] { Wire.streams(answer) }

    private func logLines(_ proxy: ConfiguredProxy, waitingFor count: Int) -> [[String: Any]] {
        Wire.jsonLogLines(proxy, waitingFor: count)
    }

    @Test("h2c with prior knowledge (curl --http2-prior-knowledge --connect-to): the token is injected, the echo scrubbed, the line says h2c")
    func h2cPriorKnowledgeWithCurl() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(body: "auth=\(request.header("authorization") ?? "-")")
            }
        }
        defer { origin.stop() }
        let token = Wire.canary("h2c-token")
        let proxy = try h2cProxy(origin, token: token)
        defer { _ = proxy.process.terminate() }
        let (status, body) = try curl([
            "--http2-prior-knowledge", "--connect-to", "\(origin.authority):127.0.0.1:\(proxy.port)",
            "-H", "Authorization: Bearer \(Wire.canary("client-own"))", "\(origin.url)/v1/items",
        ])
        #expect(status == 0)
        #expect(origin.requests.map { $0.header("authorization") } == ["Bearer \(token)"], "the scope's token replaced the client's")
        #expect(body == "auth=Bearer " + String(repeating: "*", count: token.utf8.count), "the echo of the token is masked")
        let line = try #require(logLines(proxy, waitingFor: 1).first)
        #expect(line["proto"] as? String == "h2c")
        #expect(line["injected"] as? [String] == ["Authorization"])
        #expect(try proxy.metrics().contains("scopeproxy_requests_by_protocol_total{proto=\"h2c\"} 1"))
    }

    @Test(
        "two streams on one connection, different decisions: one injected and answered, one refused 403 (the proxy's own port), one to another origin with the client's Authorization stripped; the token reaches only the scoped origin"
    )
    func siblingStreamsDecideAlone() throws {
        let origin = try FixtureOrigin.init()
        defer { origin.stop() }
        let other = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(body: "other auth=\(request.header("authorization") ?? "-")")
            }
        }
        defer { other.stop() }
        let token = Wire.canary("sibling-token")
        let proxy = try h2cProxy(origin, token: token)
        defer { _ = proxy.process.terminate() }
        let answer = try h2Client([
            "proxy_port": Int(proxy.port), "timeout": 10,
            "streams": [
                ["scheme": "http", "authority": origin.authority, "path": "/v1/a", "headers": [["x-test-id", "one"]]],
                ["scheme": "http", "authority": "127.0.0.1:\(proxy.port)", "path": "/v1/loop"],
                ["scheme": "http", "authority": other.authority, "path": "/x", "headers": [["authorization", "Bearer own"]]],
                ["scheme": "http", "authority": origin.authority, "path": "/v1/b", "method": "POST", "body": "hello"],
            ],
        ])
        let answered = streams(answer)
        #expect(answered.map { $0["status"] as? Int } == [200, 403, 200, 200])
        #expect((answered[1]["body"] as? String)?.contains("loop_refused") == true)
        #expect(
            (answered[2]["body"] as? String) == "other auth=-",
            "an origin no scope covers gets no credential, not even the client's own (stripped, as over HTTP/1.1)")
        #expect(origin.requests.count == 2)
        #expect(origin.requests.allSatisfy { $0.header("authorization") == "Bearer \(token)" })
        #expect(
            !other.requests.contains { String(decoding: $0.rawHead + $0.body, as: UTF8.self).contains(token) },
            "the token never reached the other origin")
        #expect(
            origin.requests.first { $0.method == "POST" }?.body == Array("hello".utf8),
            "a body without a length arrives whole (re-framed as chunks)")
        let lines = logLines(proxy, waitingFor: 4)
        #expect(lines.count == 4, "one line per stream")
        #expect(Set(lines.compactMap { $0["proto"] as? String }) == ["h2c"])
        #expect(Set(lines.compactMap { $0["id"] as? String }).count == 4, "each stream has its own request id")
    }

    @Test("a stream waiting for an OAuth2 token does not hold up its siblings on the same connection")
    func tokenWaitDoesNotStallSiblings() throws {
        let rig = try OAuth2ProxyTests.Rig()
        rig.endpoint.set(.grant, delay: 3)
        let other = try FixtureOrigin()
        defer { other.stop() }
        let answer = try h2Client([
            "proxy_port": Int(rig.proxy.port), "timeout": 20,
            "streams": [
                ["scheme": "http", "authority": rig.origin.authority, "path": "/v1/waits"],
                ["scheme": "http", "authority": other.authority, "path": "/flows"],
            ],
        ])
        let answered = streams(answer)
        #expect(answered.map { $0["status"] as? Int } == [200, 200])
        #expect(answer["ended"] as? [Int] == [3, 1], "the sibling ended while the first stream still waited for its token")
        #expect(rig.origin.requests.map { $0.header("authorization") } == ["Bearer CANARY-at-1"])
    }

    @Test("inside an intercepted tunnel, a stream whose :authority names another origin is 421 and reaches no origin; its sibling is served")
    func misdirectedStreamInsideTunnel() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = Wire.canary("tunnel-token")
        let proxy = try Wire.interceptingProxy(originPort: origin.port, upstreamCA: pki.caPath, token: token)
        defer { _ = proxy.process.terminate() }
        let answer = try h2Client([
            "proxy_port": Int(proxy.port), "timeout": 10,
            "tunnel": ["host": "localhost", "port": Int(origin.port), "ca": proxy.scratch.path + "/ca/scopeproxy-ca.pem"],
            "streams": [
                ["scheme": "https", "authority": "other.example:\(origin.port)", "path": "/v1/elsewhere"],
                ["scheme": "https", "authority": "localhost:\(origin.port)", "path": "/v1/here"],
            ],
        ])
        #expect(answer["alpn"] as? String == "h2")
        let answered = streams(answer)
        #expect(answered.map { $0["status"] as? Int } == [421, 200])
        #expect((answered[0]["body"] as? String)?.contains("misdirected_request") == true)
        #expect(origin.received.count == 1, "only the tunnel's own origin was asked")
        #expect(origin.received.joined().contains("Bearer \(token)"))
        #expect(!origin.received.joined().contains("elsewhere"))
        let lines = logLines(proxy, waitingFor: 3)
        #expect(lines.filter { $0["proto"] as? String == "h2" }.count == 2)
    }

    @Test("httpx with http2=True through the proxy (HTTPS_PROXY, intercepted): HTTP/2 end to end on the client side, the token injected")
    func httpxHTTP2ThroughInterception() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = Wire.canary("httpx-token")
        let proxy = try Wire.interceptingProxy(originPort: origin.port, upstreamCA: pki.caPath, token: token)
        defer { _ = proxy.process.terminate() }
        let script = """
            import httpx, sys
            with httpx.Client(proxy=sys.argv[1], verify=sys.argv[2], http2=True, timeout=10) as client:
                for path in ("/v1/a", "/v1/b"):
                    response = client.get(sys.argv[3] + path)
                    print(response.http_version, response.status_code)
            """
        let (status, output) = try runProgram([
            "/usr/bin/env", "python3", "-c", script, "http://127.0.0.1:\(proxy.port)", proxy.scratch.path + "/ca/scopeproxy-ca.pem",
            "https://localhost:\(origin.port)",
        ])
        #expect(status == 0, "\(output.suffix(300))")
        #expect(output.split(separator: "\n").suffix(2) == ["HTTP/2 200", "HTTP/2 200"])
        #expect(origin.received.count == 2)
        #expect(origin.received.allSatisfy { $0.contains("Bearer \(token)") })
    }

    @Test(
        "a flood ends that connection only, with a GOAWAY (ENHANCE_YOUR_CALM) and a stderr line; another client is served meanwhile",
        arguments: ["rapid_reset", "continuation", "ping", "settings", "empty_data"])
    func floodEndsOnlyItsConnection(_ kind: String) throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try h2cProxy(origin, token: Wire.canary("flood-token"))
        defer { _ = proxy.process.terminate() }
        let answer = try h2Client([
            "proxy_port": Int(proxy.port), "timeout": 15,
            "flood": ["kind": kind, "count": kind == "continuation" ? 200 : 5_000, "scheme": "http", "authority": origin.authority],
        ])
        let goaway = answer["goaway"] as? [String: Any]
        #expect(goaway?["code"] as? Int == 11 || (goaway == nil && answer["closed"] as? Bool == true), "\(answer)")
        if let goaway { #expect(goaway["code"] as? Int == 11, "ENHANCE_YOUR_CALM") }
        // The proxy keeps serving: a fresh client gets its answer.
        let after = try h2Client([
            "proxy_port": Int(proxy.port), "timeout": 10,
            "streams": [["scheme": "http", "authority": origin.authority, "path": "/v1/after"]],
        ])
        #expect(streams(after).first?["status"] as? Int == 200)
        #expect(proxy.process.standardError.contains("h2_connection_ended"), "the end is said, with its reason")
        #expect(try proxy.metrics().contains("scopeproxy_h2_connections_ended_total{reason=\""), "and counted")
    }

    @Test("more concurrent streams than limits.h2_max_concurrent_streams: the excess is refused (REFUSED_STREAM), the rest answered")
    func concurrentStreamLimit() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                usleep(200_000)  // keep the streams open together
                connection.respond(body: request.target)
            }
        }
        defer { origin.stop() }
        let proxy = try h2cProxy(origin, token: Wire.canary("limit-token"), extra: "limits: { h2_max_concurrent_streams: 4 }")
        defer { _ = proxy.process.terminate() }
        let answer = try h2Client([
            "proxy_port": Int(proxy.port), "timeout": 15,
            "streams": (0..<8).map { ["scheme": "http", "authority": origin.authority, "path": "/v1/\($0)"] as [String: Any] },
        ])
        let answered = streams(answer)
        let refused = answered.filter { $0["reset"] as? Int == 7 }.count
        let served = answered.filter { $0["status"] as? Int == 200 }.count
        #expect(refused + served == 8, "\(answered)")
        #expect(served >= 4 && refused >= 1, "served \(served), refused \(refused)")
    }

    @Test("a 1 MiB upload and a 1 MiB download on one stream each, with flow control: bytes intact, memory bounded by the windows")
    func largeBodiesBothWays() throws {
        let payload = String(repeating: "0123456789abcdef", count: 65_536)
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                if request.target.hasSuffix("/down") {
                    connection.respond(body: payload)
                } else {
                    connection.respond(body: "received=\(request.body.count)")
                }
            }
        }
        defer { origin.stop() }
        let proxy = try h2cProxy(origin, token: Wire.canary("large-token"))
        defer { _ = proxy.process.terminate() }
        let answer = try h2Client([
            "proxy_port": Int(proxy.port), "timeout": 30,
            "streams": [
                ["scheme": "http", "authority": origin.authority, "path": "/v1/up", "method": "POST", "body": payload],
                ["scheme": "http", "authority": origin.authority, "path": "/v1/down"],
            ],
        ])
        let answered = streams(answer)
        #expect(answered.first?["body"] as? String == "received=\(payload.utf8.count)")
        #expect((answered.last?["body"] as? String)?.count == payload.utf8.count)
        #expect(answered.last?["body"] as? String == payload)
    }
}
