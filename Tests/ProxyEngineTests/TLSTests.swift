import Foundation
import TestSupport
import Testing

/// A proxy whose config scopes `origins`, intercepting per `intercept`, with its CA in a scratch dir.
private final class TLSProxy {
    private let directory: ScratchDirectory
    var scratch: String { directory.path }
    let proxy: ProxyProcess
    var caPath: String { scratch + "/ca/scopeproxy-ca.pem" }
    var url: String { "http://127.0.0.1:\(proxy.port)" }

    init(
        pki: TestPKI, scopes: String, intercept: String = "scoped", tunnel: String = "deny", redirects: String = "pass",
        extra: String = "", environment: [String: String]
    ) throws {
        directory = ScratchDirectory()
        let scratch = directory.path
        let config = scratch + "/c.yaml"
        try """
        secrets: { token: { env: TOKEN } }
        scopes: \(scopes)
        redirects: { cross_origin: \(redirects) }
        tls: { intercept: \(intercept), tunnel: \(tunnel), ca_dir: \(scratch)/ca, upstream_ca: \(pki.caPath) }
        \(extra)
        """.write(toFile: config, atomically: true, encoding: .utf8)
        proxy = try ProxyProcess(arguments: ["--config", config], environment: environment)
    }

    deinit { proxy.terminate() }
}

@Suite("TLS: interception with the local CA, verified upstream TLS", .serialized)
struct TLSTests {
    @Test("curl and python-requests trusting the scopeproxy CA get the token injected inside TLS; client credentials are stripped")
    func injectInsideTLS() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = "CANARY-tls-\(UInt32.random(in: 0...UInt32.max))"
        let tls = try TLSProxy(
            pki: pki,
            scopes: """
                [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                """, environment: ["TOKEN": token])
        let (status, body) = try curl([
            "--cacert", tls.caPath, "-x", tls.url, "-H", "X-API-Key: client-key", "https://localhost:\(origin.port)/v1/items",
        ])
        #expect(status == 0)
        #expect(origin.received.first?.contains("Bearer \(token)") == true, "the origin got the token")
        #expect(
            body.contains("\"Authorization\": \"Bearer \(String(repeating: "*", count: token.utf8.count))\""),
            "its echo reaches the client scrubbed")
        #expect(!body.contains("client-key"))

        let script = """
            import sys, requests
            r = requests.get(sys.argv[1], proxies={"https": sys.argv[2]}, verify=sys.argv[3], headers={"Cookie": "sid=client"}, timeout=10)
            print(r.status_code, r.json()["headers"].get("Authorization"), r.json()["headers"].get("Cookie"))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, "https://localhost:\(origin.port)/v1/py", tls.url, tls.caPath]
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(printed == "200 Bearer \(String(repeating: "*", count: token.utf8.count)) None\n")
        #expect(origin.received.count == 2)
        #expect(origin.received.last?.contains("Bearer \(token)") == true)
    }

    @Test("a client that stalls its TLS handshake inside an intercepted tunnel is closed after timeouts.client_header; others are served")
    func stalledClientHandshake() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let tls = try TLSProxy(
            pki: pki,
            scopes: """
                [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                """, extra: "timeouts: { client_header: 500ms }", environment: ["TOKEN": "t0k3n-stall"])
        let stalled = try TestSocket.connect(port: tls.proxy.port)
        try stalled.send("CONNECT localhost:\(origin.port) HTTP/1.1\r\nHost: localhost:\(origin.port)\r\n\r\n")
        let reader = HTTPReader(stalled)
        let head = String(decoding: try #require(try reader.readHeadBytes()), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200 "))
        // The first bytes of a ClientHello record, then nothing.
        try stalled.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        #expect(stalled.peerClosed(), "the proxy hangs up on a handshake that never completes")
        let (status, body) = try curl(["--cacert", tls.caPath, "-x", tls.url, "https://localhost:\(origin.port)/after"])
        #expect(status == 0)
        #expect(body.contains("/after"))
    }

    @Test(
        "a client that does not trust the local CA, or speaks plain HTTP in the tunnel: the CONNECT's line says why, stderr hints once; a trusting client's line has no error"
    )
    func interceptionFailuresAreSaid() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = "CANARY-intercept-\(UInt32.random(in: 0...UInt32.max))"
        let log = ScratchDirectory()
        let tls = try TLSProxy(
            pki: pki,
            scopes: """
                [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                """, extra: "log: { output: \(log.path)/access.log }", environment: ["TOKEN": token])
        // 1. curl trusting another CA only: it refuses the minted certificate (exit 60).
        let (untrusted, _) = try curl(["--cacert", pki.caPath, "-x", tls.url, "https://localhost:\(origin.port)/untrusted"])
        #expect(untrusted == 60)
        // 2. Plain HTTP inside the tunnel.
        let plain = try TestSocket.connect(port: tls.proxy.port)
        try plain.send("CONNECT localhost:\(origin.port) HTTP/1.1\r\nHost: localhost:\(origin.port)\r\n\r\n")
        _ = try HTTPReader(plain).readHeadBytes()
        try plain.send("GET /plain HTTP/1.1\r\nHost: localhost\r\n\r\n")
        #expect(plain.peerClosed())
        // 3. A second untrusting client: the stderr hint is not repeated.
        _ = try curl(["--cacert", pki.caPath, "-x", tls.url, "https://localhost:\(origin.port)/untrusted-again"])
        // 4. A client that trusts it.
        let (trusted, _) = try curl(["--cacert", tls.caPath, "-x", tls.url, "https://localhost:\(origin.port)/trusted"])
        #expect(trusted == 0)
        #expect(tls.proxy.terminate() == 0)

        let lines = try String(contentsOfFile: log.path + "/access.log", encoding: .utf8).split(separator: "\n").map(String.init)
        let connects = lines.filter { $0.contains(#""method":"CONNECT""#) }
        #expect(connects.count == 4)
        guard connects.count == 4 else { return }
        // A line is written when its tunnel ends, and the ends of the first three can come in any
        // order on a busy machine: each reason is told apart by itself, not by its place.
        let failed = connects.filter { $0.contains(#""error":"interception_failed""#) }
        #expect(failed.count == 3)
        #expect(failed.filter { $0.contains(#""reason":"client_rejected_certificate""#) }.count == 2, "both untrusting clients")
        #expect(failed.filter { $0.contains(#""reason":"not_tls""#) }.count == 1, "the plain-text client")
        #expect(connects.filter { !$0.contains("error") && $0.contains(#""decision":"intercept""#) }.count == 1, "the trusting client")
        #expect(origin.received.count == 1, "only the trusting client's request reached the origin")
        let hints = tls.proxy.standardError.components(separatedBy: #""event":"client_rejected_certificate""#).count - 1
        #expect(hints == 1, "the stderr hint is said once")
        #expect(tls.proxy.standardError.contains("scopeproxy ca"))
        #expect(!(lines.joined() + tls.proxy.standardError).contains(token))
    }

    @Test("Connection: close inside an intercepted tunnel: the whole response arrives before the close")
    func closeInsideTunnel() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let tls = try TLSProxy(
            pki: pki,
            scopes: """
                [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                """, environment: ["TOKEN": "t"])
        for round in 0..<3 {
            let (status, body) = try curl([
                "--cacert", tls.caPath, "-x", tls.url, "-H", "Connection: close", "https://localhost:\(origin.port)/big/\(round)",
            ])
            #expect(status == 0, "round \(round)")
            #expect(body.utf8.count == 4 * 1024 * 1024, "round \(round): the body is complete")
        }
    }

    @Test("a wrong-hostname and an expired upstream certificate give 502 with the reason, and the origin receives nothing")
    func verificationFailures() throws {
        let pki = try TestPKI()
        for (name, reason) in [("wronghost", "certificate name mismatch"), ("expired", "certificate expired")] {
            let origin = try HTTPSOrigin(certificate: pki.certificate(name))
            defer { origin.stop() }
            let tls = try TLSProxy(
                pki: pki,
                scopes: """
                    [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                    """, environment: ["TOKEN": "CANARY-never-sent"])
            let (_, body) = try curl(["--cacert", tls.caPath, "-x", tls.url, "https://localhost:\(origin.port)/secret"])
            #expect(body.contains("\"error\":\"upstream_tls_verification\""), "\(name)")
            #expect(body.contains(reason), "\(name): \(body)")
            #expect(origin.received.isEmpty, "\(name): nothing of the request was sent")
        }
    }

    @Test("absolute-form https:// targets sent in plain text are forwarded over verified TLS")
    func absoluteHTTPS() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let tls = try TLSProxy(pki: pki, scopes: "[]", intercept: "[]", environment: ["TOKEN": "unused"])
        let socket = try TestSocket.connect(port: tls.proxy.port)
        try socket.send("GET https://127.0.0.1:\(origin.port)/plain HTTP/1.1\r\nHost: 127.0.0.1:\(origin.port)\r\nCookie: c=1\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 200)
        #expect(response.bodyText.contains("\"path\": \"/plain\""))
        #expect(!response.bodyText.contains("Cookie"), "no scope: the cookie is stripped")
    }

    @Test(
        "a refused https upstream is 502 upstream_refused (absolute-form and intercepted CONNECT), not a TLS handshake failure; an origin that accepts and then resets still is upstream_tls_handshake"
    )
    func refusedHTTPSUpstream() throws {
        let pki = try TestPKI()
        let closed = try TestListener()
        let closedPort = closed.port
        closed.close()  // bound, then closed: nothing listens there
        let resetting = try FixtureOrigin { connection in connection.socket.reset() }
        defer { resetting.stop() }
        let tls = try TLSProxy(
            pki: pki,
            scopes: """
                [{ name: api, origins: ["https://localhost:\(closedPort)"], inject: { Authorization: "Bearer ${token}" } }]
                """, environment: ["TOKEN": "CANARY-never-sent"])

        let socket = try TestSocket.connect(port: tls.proxy.port)
        try socket.send("GET https://127.0.0.1:\(closedPort)/ HTTP/1.1\r\nHost: 127.0.0.1:\(closedPort)\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 502)
        #expect(response.bodyText.contains(#""error":"upstream_refused""#), "\(response.bodyText)")
        #expect(response.bodyText.contains("could not connect to https://127.0.0.1:\(closedPort)"))

        let (status, body) = try curl(["--cacert", tls.caPath, "-x", tls.url, "https://localhost:\(closedPort)/intercepted"])
        #expect(status == 0, "the intercepted tunnel carries the proxy's 502")
        #expect(body.contains(#""error":"upstream_refused""#), "\(body)")

        let resetSocket = try TestSocket.connect(port: tls.proxy.port)
        try resetSocket.send("GET https://127.0.0.1:\(resetting.port)/ HTTP/1.1\r\nHost: 127.0.0.1:\(resetting.port)\r\n\r\n")
        let resetResponse = try #require(try HTTPReader(resetSocket).readResponse())
        #expect(resetResponse.bodyText.contains(#""error":"upstream_tls_handshake""#), "\(resetResponse.bodyText)")
    }

    @Test("a CONNECT host that is not intercepted is tunnelled (allow) or refused with 403 (deny)")
    func notIntercepted() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let allowed = try TLSProxy(pki: pki, scopes: "[]", intercept: "[]", tunnel: "allow", environment: ["TOKEN": "unused"])
        let (status, body) = try curl(["--cacert", pki.caPath, "-x", allowed.url, "https://localhost:\(origin.port)/tunnelled"])
        #expect(status == 0, "end-to-end TLS with the origin's own certificate")
        #expect(body.contains("/tunnelled"))
        let denied = try TLSProxy(pki: pki, scopes: "[]", intercept: "[]", tunnel: "deny", environment: ["TOKEN": "unused"])
        let (deniedStatus, _) = try curl(["--cacert", pki.caPath, "-x", denied.url, "https://localhost:\(origin.port)/denied"])
        #expect(deniedStatus != 0)
        #expect(!origin.received.contains { $0.contains("/denied") })
    }

    @Test("a redirect from an intercepted https origin: pass mode re-scopes the client's follow-up; follow mode's https -> http hop carries nothing")
    func redirectsAndDowngrade() throws {
        let pki = try TestPKI()
        let plain = try FixtureOrigin(host: "127.0.0.1")
        defer { plain.stop() }
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"), redirectTo: "\(plain.url)/landing")
        defer { origin.stop() }
        let token = "CANARY-redirect-\(UInt32.random(in: 0...UInt32.max))"
        let scopes = """
            [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" }, pass: [Cookie] },
             { name: dev, origins: ["\(plain.url)"], require_https: false, inject: { X-Dev-Token: "${token}" }, pass: [Cookie] }]
            """
        let pass = try TLSProxy(pki: pki, scopes: scopes, environment: ["TOKEN": token])
        let (status, _) = try curl([
            "--cacert", pass.caPath, "-x", pass.url, "-L", "-H", "Cookie: sid=client-cookie", "https://localhost:\(origin.port)/redirect",
        ])
        #expect(status == 0)
        #expect(origin.received.first?.contains(token) == true)
        #expect(plain.requests.first?.header("x-dev-token") == token, "the follow-up is scoped on its own origin")
        #expect(plain.requests.first?.header("authorization") == nil)

        let follow = try TLSProxy(pki: pki, scopes: scopes, redirects: "follow", environment: ["TOKEN": token])
        let (followStatus, _) = try curl([
            "--cacert", follow.caPath, "-x", follow.url, "-H", "Cookie: sid=client-cookie", "https://localhost:\(origin.port)/redirect",
        ])
        #expect(followStatus == 0)
        let downgraded = try #require(plain.requests.last)
        #expect(downgraded.target == "/landing")
        #expect(downgraded.header("x-dev-token") == nil, "an https -> http hop carries no credential")
        #expect(downgraded.header("cookie") == nil)
        #expect(!downgraded.rawHeadText.contains(token))
    }

    @Test("the CA: key 0600 in a 0700 directory, created once and reused; `scopeproxy ca` prints it")
    func certificateAuthorityFiles() throws {
        let workspace = ScratchDirectory()
        let scratch = workspace.path
        let config = scratch + "/c.yaml"
        try "tls: { ca_dir: \(scratch)/nested/ca }\n".write(toFile: config, atomically: true, encoding: .utf8)
        let first = try ProxyProcess.runToCompletion(["ca", "--config", config])
        #expect(first.status == 0)
        #expect(first.stdout.hasPrefix("-----BEGIN CERTIFICATE-----"))
        let second = try ProxyProcess.runToCompletion(["ca", "--config", config])
        #expect(second.stdout == first.stdout, "reused, not re-created")
        let key = try FileManager.default.attributesOfItem(atPath: scratch + "/nested/ca/scopeproxy-ca-key.pem")
        #expect((key[.posixPermissions] as? Int) == 0o600)
        let directory = try FileManager.default.attributesOfItem(atPath: scratch + "/nested/ca")
        #expect((directory[.posixPermissions] as? Int) == 0o700)
        let subject = try curlSubject(scratch + "/nested/ca/scopeproxy-ca.pem")
        #expect(subject.contains("scopeproxy local CA"))
    }

    private func curlSubject(_ path: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["x509", "-noout", "-subject", "-in", path]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text
    }
}
